"""Run settings: configs/run.yml (documented there) merged over built-in defaults, as one frozen record."""
from __future__ import annotations

import difflib

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

from harness import ROOT
from harness.results.stats import StoppingRule
from harness.problem import CaseError
from harness.shapes import read_yaml_file

#: The official evaluator's modes, as ``run --mode`` takes them (harness.parent.runner runs them).
MODES = ("test", "benchmark", "leaderboard", "profile")
#: The modes that take timed samples, so have a time budget (``budget_s``): compare is ``fp4bench compare``.
TIMED_MODES = ("benchmark", "leaderboard", "compare")

DEFAULT_FILE = ROOT / "configs" / "run.yml"


SECTIONS = ("timeouts", "timing", "sandbox")
#: The longest time a setting in seconds (a name ending in _s) or --timeout may give: 10^6 s, 11.6 days. The
#: waits pass it to select() and add it to clock readings, which overflow on the platform's time_t far above it.
MAX_SECONDS = 1e6
#: Settings that take one of a few words instead of a number.
CHOICES = {"isolate_pid_ipc": ("auto", "always", "never")}
_SECTION_LIST = ", ".join(repr(s) for s in SECTIONS[:-1]) + f" and {SECTIONS[-1]!r}"


class SettingsError(ValueError):
    """configs/run.yml (or --settings) holds an unknown key or a value of the wrong kind."""


@dataclass(frozen=True)
class Settings:
    """Every run setting, with its default: the one place the numbers live (configs/run.yml repeats them as
    documentation; tests/harness/cli/test_cli.py holds the two equal). Times in s unless the name says
    otherwise."""

    import_s: float = 300.0
    first_call_s: float = 900.0
    call_s: float = 120.0
    calls_per_sample: int = 15
    warmup_samples: int = 1
    warmup_max: int = 10
    warmup_settle: float = 0.1
    min_runs: int = 3
    min_time_ms: float = 100.0
    max_rel_err: float = 0.001
    max_runs: int = 100
    max_wall_s: float = 120.0
    budget_s: tuple = (("benchmark", 10.0), ("leaderboard", 30.0), ("compare", 10.0))  # per TIMED_MODES
    limit_address_space_mb: int = 32768   # sandbox: the worker's limits (harness/parent/sandbox.py)
    limit_file_size_mb: int = 16384
    limit_processes: int = 4096
    limit_cpu_s: float = 36000.0
    isolate_pid_ipc: str = "auto"

    def stopping_rule(self, mode: str) -> StoppingRule:
        """The official stopping rule with this run's numbers; ``mode`` (one of TIMED_MODES) picks the time
        budget. Raises ValueError for a mode without timed samples or a budget."""
        budgets = dict(self.budget_s)
        if mode not in budgets:
            raise ValueError(f"no time budget for mode {mode!r}: budgets exist for {', '.join(budgets)}")
        budget = budgets[mode]
        return StoppingRule(self.min_runs, self.min_time_ms * 1e6, self.max_rel_err, budget * 1e9,
                            self.max_wall_s * 1e9, self.max_runs)

    def with_timing(self, timing, mode: str) -> "Settings":
        """The calls per sample and the most samples of a problem's official loop (a harness.problem.TimingLoop)
        in ``mode`` (leaderboard, else the benchmark figures), except where these settings differ from the
        defaults (a --settings file that sets ``max_runs: 5`` gets 5)."""
        most = timing.max_samples_leaderboard if mode == "leaderboard" else timing.max_samples_benchmark
        default = Settings()
        official = {"calls_per_sample": timing.calls_per_sample, "max_runs": most}
        return replace(self, **{k: v for k, v in official.items() if getattr(self, k) == getattr(default, k)})

    def with_timeout(self, seconds: float) -> "Settings":
        """The calls' time limits (``first_call_s``, ``call_s``) set to ``seconds`` (--timeout). ``import_s`` keeps
        its value: it bounds the worker's start-up (Python, torch, the CUDA context, the profiler) and the
        submission's import, which a busy machine slows whatever the kernel does."""
        return replace(self, first_call_s=seconds, call_s=seconds)


def load_settings(path: Path | None = None) -> Settings:
    """Read ``path`` (default configs/run.yml). Raises SettingsError naming the bad key and what was expected."""
    path = Path(path) if path else DEFAULT_FILE
    if not path.is_file():
        if path == DEFAULT_FILE:
            return Settings()
        raise SettingsError(f"settings file {path} does not exist")
    try:
        doc = read_yaml_file(path) or {}
    except CaseError as exc:
        raise SettingsError(str(exc)) from None
    if not isinstance(doc, dict):
        raise SettingsError(f"{path}: expected a mapping with sections {_SECTION_LIST}, "
                            f"got {type(doc).__name__}")
    flat: dict = {}
    section_of: dict = {}
    for section, values in doc.items():
        if section not in SECTIONS:
            raise SettingsError(f"{path}: expected sections {_SECTION_LIST}, got {section!r}")
        if not isinstance(values, dict):
            raise SettingsError(f"{path}: section {section} must map setting -> value, got {values!r}")
        flat.update(values)
        section_of.update(dict.fromkeys(values, section))
    defaults = Settings()
    out = {}
    for key, value in flat.items():
        if not hasattr(defaults, key):
            names = [f.name for f in fields(Settings)]
            near = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (settings: {', '.join(names)})"
            raise SettingsError(f"{path}: unknown setting {key!r} in section {section_of[key]}{hint}")
        if key == "budget_s":
            out[key] = _budgets(path, value, defaults.budget_s)
            continue
        if key in CHOICES:
            if value not in CHOICES[key]:
                raise SettingsError(f"{path}: {key} must be one of {', '.join(CHOICES[key])}, got {value!r}")
            out[key] = value
            continue
        want = type(getattr(defaults, key))
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (want is int and not isinstance(value, int)):
            hint = ""
            if isinstance(value, str):
                try:
                    float(value)  # YAML 1.1 reads 1e3 as a string: an exponent needs a dot and a sign
                    hint = " (a string to YAML: write 1000 or 1.0e+3)"
                except ValueError:
                    pass
            raise SettingsError(f"{path}: {key} must be {'an' if want is int else 'a'} {want.__name__}, got "
                                f"{value!r}{hint}")
        if not math.isfinite(value) or value <= 0:
            raise SettingsError(f"{path}: {key} must be a positive finite number, got {value!r}")
        if key.endswith("_s") and value > MAX_SECONDS:
            raise SettingsError(f"{path}: {key} must be at most {MAX_SECONDS:g} seconds, got {value!r}")
        out[key] = want(value)
    settings = replace(defaults, **out)
    for low, high in (("min_runs", "max_runs"), ("warmup_samples", "warmup_max")):
        if getattr(settings, low) > getattr(settings, high):
            raise SettingsError(f"{path}: {low} ({getattr(settings, low)}) must not exceed {high} "
                                f"({getattr(settings, high)})")
    return settings


def _budgets(path: Path, value, defaults: tuple) -> tuple:
    """``budget_s`` from a settings file merged over ``defaults`` (a file may name only the modes it changes).
    Raises SettingsError for an unknown mode, a mode without timed samples, or a budget that is not a positive
    number."""
    if not isinstance(value, dict):
        raise SettingsError(f"{path}: budget_s must map mode -> seconds, got {value!r}")
    budgets = dict(defaults)
    for mode, seconds in value.items():
        if mode not in TIMED_MODES:
            what = "takes no timed samples" if mode in MODES else "is not a mode"
            raise SettingsError(f"{path}: budget_s: {mode!r} {what}; budgets are for {', '.join(TIMED_MODES)}")
        if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds)
                or not 0 < seconds <= MAX_SECONDS):
            raise SettingsError(f"{path}: budget_s: {mode} must be a positive number of seconds up to "
                                f"{MAX_SECONDS:g}, got {seconds!r}")
        budgets[mode] = float(seconds)
    return tuple(budgets.items())
