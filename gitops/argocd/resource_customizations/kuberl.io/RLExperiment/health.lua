-- Argo CD health of a kuberl.io/RLExperiment.
-- Order matters: a suspended experiment is Suspended whatever its status says; a status the operator
-- wrote for an older generation says nothing about the current spec; a failure outranks the rest.
local hs = {}

local function find(conditions, kind)
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function is(c, value)
  return c ~= nil and c.status == value
end

local function describe(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "Experiment is suspended: pods deleted, storage kept"
  return hs
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile the experiment"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = status.conditions or {}
local stalled = find(conditions, "Stalled")
local succeeded = find(conditions, "Succeeded")
local reconciling = find(conditions, "Reconciling")
local ready = find(conditions, "Ready")

if status.phase == "Failed" or is(stalled, "True") or is(succeeded, "False") then
  hs.status = "Degraded"
  hs.message = describe(stalled, describe(succeeded, status.message or "Experiment failed"))
  return hs
end

if status.phase == "Succeeded" or is(succeeded, "True") then
  hs.status = "Healthy"
  hs.message = describe(succeeded, "Experiment succeeded")
  return hs
end

if is(reconciling, "True") then
  hs.status = "Progressing"
  hs.message = describe(reconciling, "Experiment is " .. (status.phase or "Pending"))
  return hs
end

if is(ready, "True") then
  hs.status = "Healthy"
  hs.message = describe(ready, "Experiment is training")
  return hs
end

hs.status = "Progressing"
hs.message = "Experiment is " .. (status.phase or "Pending")
return hs
