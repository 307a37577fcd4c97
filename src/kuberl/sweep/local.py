"""`kuberl sweep`: a sweep on this machine, each trial a `kuberl train` process, with the same search,
runs and rounds as the operator (search.py, plan.py, pbt.py).

The sweep's directory holds `sweep.yaml` (the spec it runs), `state.json` (the durable SweepState,
replaced atomically after every change), `runs/TRIAL/` (each run's results, checkpoints and traces)
and, at the end, `summary.json` and `summary.png`. Running the command again with the same directory
continues the sweep: finished trials stay, unfinished ones resume from their own checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kuberl.api.field_errors import FieldError, ManifestError
from kuberl.api.sweep_types import (
    FINISHED_TRIAL_STATES,
    RLSweep,
    RLSweepSpec,
    SweepPhase,
    TrialRecord,
    TrialState,
)
from kuberl.api.types import API_VERSION, KIND
from kuberl.api.yaml_text import dump_yaml, load_yaml
from kuberl.sweep import plan, search
from kuberl.sweep.pbt import step_round
from kuberl.sweep.search import Outcome, SweepState

POLL_SECONDS = 0.5
STATE_FILE = "state.json"
SPEC_FILE = "sweep.yaml"
LOG_LINES = 5
# What a sweep that continues in the same directory must share with the one that started it.
_FIXED_FIELDS = ("template", "parameters", "objective", "search", "seedsPerTrial")


@dataclass
class Run:
    """One `kuberl train` process: a seed of a trial, or a PBT segment of a member."""

    name: str
    trial: int
    proc: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)
    returncode: int | None = None
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    stopped: bool = False  # terminated by the sweep (pruned, or the sweep ended)

    def poll(self) -> int | None:
        """The exit code once the process ended (its CPU time taken from the kernel's rusage)."""
        if self.returncode is None:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid == 0:
                return None
            self.returncode = os.waitstatus_to_exitcode(status)
            self.proc.returncode = self.returncode
            self.cpu_seconds = usage.ru_utime + usage.ru_stime
            self.wall_seconds = time.monotonic() - self.started
        return self.returncode

    def stop(self) -> None:
        """SIGTERM: the trainer writes a final checkpoint and exits."""
        self.stopped = True
        if self.returncode is None:
            self.proc.send_signal(signal.SIGTERM)


@dataclass
class TrialCost:
    timesteps: int = 0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0


def read_results(run_root: Path) -> list[dict[str, Any]]:
    """A run's results.jsonl as far as it is written (a line being written is skipped)."""
    path = run_root / "results.jsonl"
    if not path.exists():
        return []
    results = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            results.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return results


def run_manifests(spec: RLSweepSpec, record: TrialRecord, pbt_round: int = 0) -> list[dict[str, Any]]:
    """The trial's runs as plan.py makes them (the operator's too), as manifests for `kuberl train`: every run
    goes under the sweep's directory, so the template's storage is left out."""
    manifests = []
    for run in plan.trial_runs(spec, record, pbt_round):
        run.spec.pop("storage", None)
        manifests.append({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": run.name}, "spec": run.spec})
    return manifests


def final_value(results: list[dict[str, Any]], metric: str) -> float | None:
    """The metric of the last result that reports it."""
    for result in reversed(results):
        value = search.metric_of(result, metric)
        if value is not None:
            return value
    return None


class LocalSweep:
    """`LocalSweep(sweep, directory).run()`: trials as processes, at most `parallelism` at once."""

    def __init__(self, sweep: RLSweep, directory: Path, *, out: TextIO | None = None, quiet: bool = False,
                 fresh: bool = False) -> None:
        if sweep.spec.suspend:
            raise ManifestError([FieldError("spec.suspend", "a sweep on this machine is not suspended: stop it "
                                                            "(Ctrl-C) and run the command again to continue it")])
        self.sweep = sweep
        self.spec = sweep.spec
        self.directory = directory
        self.runs_dir = directory / "runs"
        self.out = out or sys.stdout
        self.quiet = quiet
        self.runs: dict[str, Run] = {}
        self.costs: dict[int, TrialCost] = {}
        self.started = time.monotonic()
        self._header_printed = False
        self._unreported: set[int] = set()  # trials started whose row is not printed yet
        self.state = self._open(fresh)

    # -- the durable state -------------------------------------------------------------------------------
    def _open(self, fresh: bool) -> SweepState:
        spec_file, state_file = self.directory / SPEC_FILE, self.directory / STATE_FILE
        manifest = self.sweep.to_manifest()
        if fresh and self.directory.exists():
            for name in (STATE_FILE, SPEC_FILE, "summary.json", "summary.png"):
                (self.directory / name).unlink(missing_ok=True)
            if self.runs_dir.exists():  # kept aside, never deleted: they may hold the only copy of a policy
                self.runs_dir.rename(self.directory / time.strftime("runs-%Y%m%d-%H%M%S", time.gmtime()))
        if state_file.exists() and spec_file.exists():
            old = (load_yaml(spec_file.read_text()) or {}).get("spec") or {}
            changed = [f"spec.{k}" for k in _FIXED_FIELDS if old.get(k) != manifest["spec"].get(k)]
            if changed:
                raise ManifestError([FieldError(path, f"differs from the sweep in {self.directory} (continue it "
                                                      "unchanged, or use --fresh or another --dir)")
                                     for path in changed])
            state = SweepState.model_validate_json(state_file.read_text())
            self.log(f"continuing the sweep in {self.directory}: {len(state.trials)} trials recorded")
            return state
        self.directory.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(dump_yaml(manifest, sort_keys=False))
        return SweepState()

    def save(self) -> None:
        path = self.directory / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.state.model_dump_json(by_alias=True, indent=1))
        os.replace(tmp, path)

    def log(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.out, flush=True)

    # -- runs ----------------------------------------------------------------------------------------------
    def _run_names(self, record: TrialRecord) -> list[str]:
        return plan.run_names(self.spec, record, self.state.pbt_round)

    def _start(self, record: TrialRecord) -> None:
        for manifest in run_manifests(self.spec, record, self.state.pbt_round):
            name = manifest["metadata"]["name"]
            if name in self.runs and self.runs[name].poll() is None:
                continue
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            path = self.runs_dir / f"{name}.yaml"
            path.write_text(dump_yaml(manifest, sort_keys=False))
            log = self.runs_dir / f"{name}.log"
            with log.open("ab") as sink:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "kuberl.cli", "train", "-f", str(path), "--quiet",
                     "--storage", f"file://{self.runs_dir.resolve()}"],
                    stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                )
            self.runs[name] = Run(name, record.number, proc, log)
        record.state = TrialState.RUNNING
        self._unreported.add(record.number)

    def _trial_runs(self, record: TrialRecord) -> list[Run]:
        return [self.runs[name] for name in self._run_names(record) if name in self.runs]

    def _results(self, record: TrialRecord) -> list[list[dict[str, Any]]]:
        return [read_results(self.runs_dir / name) for name in self._run_names(record)]

    def _tail(self, run: Run) -> str:
        try:
            lines = run.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in lines[-LOG_LINES:])[-600:]

    def _account(self, record: TrialRecord, runs: list[Run], results: list[list[dict[str, Any]]]) -> None:
        cost = self.costs.setdefault(record.number, TrialCost())
        cost.cpu_seconds += sum(r.cpu_seconds for r in runs)
        cost.wall_seconds += max((r.wall_seconds for r in runs), default=0.0)
        cost.timesteps = max(cost.timesteps, max((int(r[-1].get("timesteps", 0)) for r in results if r), default=0))

    # -- one trial's progress ---------------------------------------------------------------------------
    def _observe(self, record: TrialRecord) -> None:
        """Intermediate values, pruning, and the end of the trial's runs."""
        metric = self.spec.objective.metric
        results = self._results(record)
        early = self.spec.early_stopping
        if early is not None and early.algorithm != "none" and record.state == TrialState.RUNNING:
            points = search.mean_intermediate([search.intermediate_values(r, metric, early.interval)
                                               for r in results])
            if len(points) > len(record.intermediate):
                record.intermediate = points
                if search.should_prune(self.spec, self.state, record.number):
                    for run in self._trial_runs(record):
                        run.stop()
                    search.finish(record, TrialState.PRUNED, points[-1][1],
                                  f"pruned at {int(points[-1][0]):,} steps ({early.algorithm})")
                    self.save()
        runs = self._trial_runs(record)
        if any(run.poll() is None for run in runs):
            return
        self._account(record, runs, results)
        if record.state == TrialState.PRUNED:
            self._row(record)
            return
        failed = [run for run in runs if run.returncode != 0 and not run.stopped]
        values = [final_value(r, metric) for r in results]
        if failed:
            search.finish(record, TrialState.FAILED, None, f"{failed[0].name} exited {failed[0].returncode}: "
                          f"{self._tail(failed[0])}")
        elif any(v is None for v in values):
            search.finish(record, TrialState.FAILED, None, f"no {metric} reported")
        else:
            search.finish(record, TrialState.SUCCEEDED, sum(values) / len(values))  # type: ignore[arg-type]
        self.save()
        self._row(record)

    # -- output --------------------------------------------------------------------------------------------
    def _row(self, record: TrialRecord) -> None:
        self._unreported.discard(record.number)
        if not self._header_printed:
            self.log(f"{'trial':<6} {'state':<10} {self.spec.objective.metric:>18} {'steps':>9} {'cpu s':>7}  params")
            self._header_printed = True
        cost = self.costs.get(record.number, TrialCost())
        value = "" if record.value is None else f"{record.value:.4g}"
        params = " ".join(f"{k}={_short(v)}" for k, v in record.params.items())
        self.log(f"{record.number:<6} {record.state.value:<10} {value:>18} {cost.timesteps:>9,} "
                 f"{cost.cpu_seconds:>7.0f}  {params}" + (f"  ({record.message})" if record.message and
                                                             record.state == TrialState.FAILED else ""))

    # -- the loops -----------------------------------------------------------------------------------------
    def run(self) -> Outcome:
        try:
            ended = self._run_pbt() if self.spec.search.algorithm == "pbt" else self._run_search()
        except BaseException:
            self._stop_all()
            self.save()
            raise
        self._stop_all()
        self.save()
        return ended

    def _run_search(self) -> Outcome:
        for record in search.active(self.state):  # a continued sweep: its unfinished trials resume
            self._start(record)
        while True:
            ended = search.outcome(self.spec, self.state)
            if ended is not None and not self._unreported:
                return ended
            if ended is not None:  # a target reached, too many failures: what still runs stops
                for record in search.active(self.state):
                    for run in self._trial_runs(record):
                        run.stop()
                    search.finish(record, TrialState.PRUNED,
                                  record.intermediate[-1][1] if record.intermediate else None,
                                  f"stopped: the sweep ended ({ended.reason})")
                self.save()
            else:
                for record in search.propose(self.spec, self.state, self.sweep.name):
                    self.save()
                    self._start(record)
            for number in sorted(self._unreported):
                self._observe(self.state.trials[number])
            time.sleep(POLL_SECONDS)

    def _run_pbt(self) -> Outcome:
        """Rounds of perturbationInterval steps: every member trains its segment (parallelism at a time),
        then the exploit/explore step; the last round's values are the trials' values."""
        spec = self.spec
        search.propose(spec, self.state, self.sweep.name)
        self.save()
        while True:
            end = plan.round_end(spec, self.state.pbt_round)
            queue = [t for t in self.state.trials if t.state not in FINISHED_TRIAL_STATES]
            started: list[TrialRecord] = []
            while queue or started:
                while queue and len(started) < spec.parallelism:
                    record = queue.pop(0)
                    self._start(record)
                    started.append(record)
                for record in [t for t in started if all(r.poll() is not None for r in self._trial_runs(t))]:
                    started.remove(record)
                    self._segment_end(record, end)
                time.sleep(POLL_SECONDS)
            ended = search.outcome(spec, self.state)
            if ended is not None and ended.phase == SweepPhase.FAILED:
                return ended
            if not any(t.state == TrialState.RUNNING for t in self.state.trials):
                return ended or Outcome(SweepPhase.FAILED, "NoTrialSucceeded", "every member failed")
            if self.state.pbt_round + 1 >= plan.rounds(spec):
                break
            self._pbt_step(end)
        for record in self.state.trials:
            if record.state == TrialState.RUNNING:
                search.finish(record, TrialState.SUCCEEDED, record.value)
                self._row(record)
        self.save()
        return search.outcome(spec, self.state) or Outcome(SweepPhase.SUCCEEDED, "TrialsDone", "population trained")

    def _segment_end(self, record: TrialRecord, end: int) -> None:
        (run,) = self._trial_runs(record)
        results = self._results(record)
        self._account(record, [run], results)
        value = final_value(results[0], self.spec.objective.metric)
        if run.returncode != 0 or value is None:
            reason = f"exited {run.returncode}: {self._tail(run)}" if run.returncode else \
                f"no {self.spec.objective.metric} reported"
            search.finish(record, TrialState.FAILED, None, f"{run.name} {reason}")
            self._row(record)
        else:
            plan.record_round(record, end, value)
        self.save()

    def _pbt_step(self, end: int) -> None:
        """After a round: each member continues from its own checkpoint, a lagging one from a leader's."""
        from kuberl.trainer.storage import open_store
        from kuberl.trainer.storage.checkpoints import latest_checkpoint

        checkpoints: dict[int, str] = {}
        for record in search.active(self.state):
            info = latest_checkpoint(open_store(f"file://{(self.runs_dir / self._run_names(record)[0]).resolve()}"))
            if info is None:
                search.finish(record, TrialState.FAILED, None, f"{self._run_names(record)[0]} left no checkpoint to "
                              "continue from")
                self._row(record)
            else:
                checkpoints[record.number] = info.uri
        scores = {t.number: t.value for t in search.active(self.state)}
        steps = step_round(self.spec, self.state, checkpoints)
        self.save()
        self.log(f"pbt round {self.state.pbt_round} at {end:,} steps: "
                 + ", ".join(f"{n}={_short(v)}" for n, v in sorted(scores.items())))
        for step in steps:
            record = self.state.trial(step.trial)
            self.log(f"  trial {step.trial} ({_short(scores[step.trial])}) <- trial {step.donor} "
                     f"({_short(scores[step.donor])}): {record.restored_from}, "
                     + " ".join(f"{k}={_short(v)}" for k, v in step.params.items()))
        self.runs = {}

    def _stop_all(self) -> None:
        for run in self.runs.values():
            if run.poll() is None:
                run.stop()
        deadline = time.monotonic() + 60
        while any(run.poll() is None for run in self.runs.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for run in self.runs.values():
            if run.poll() is None:
                run.proc.kill()
                run.proc.wait()


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
