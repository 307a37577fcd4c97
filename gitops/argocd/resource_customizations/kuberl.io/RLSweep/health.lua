-- Argo CD health of a kuberl.io/RLSweep.
-- A suspended sweep is Suspended; a status written for an older generation says nothing about the
-- current spec; a failed sweep is Degraded, a finished one Healthy; a running one is Progressing (as a
-- Job is: it works towards an end).
local hs = {}

local function find(conditions, kind)
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "Sweep is suspended: its trials are suspended, nothing new is proposed"
  return hs
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile the sweep"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = status.conditions or {}
local failed = find(conditions, "Failed")
if status.phase == "Failed" or (failed ~= nil and failed.status == "True") then
  hs.status = "Degraded"
  hs.message = status.message or (failed ~= nil and failed.message) or "Sweep failed"
  return hs
end

if status.phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = status.message or "Sweep succeeded"
  return hs
end

local done = status.trialsSucceeded or 0
local running = status.trialsRunning or 0
local message = "Sweep is " .. (status.phase or "Pending") .. ": " .. tostring(done) .. " trials done, " ..
  tostring(running) .. " running"
if status.best ~= nil and status.best.value ~= nil then
  message = message .. ", best " .. tostring(status.best.value)
end
hs.status = "Progressing"
hs.message = message
return hs
