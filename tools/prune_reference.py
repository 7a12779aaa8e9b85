#!/usr/bin/env python3
"""Optuna's decisions on sequences of reported values: the reference for amptune's pruning rules.

    tools/prune_reference.py CASES.json [OUT.json]      (OUT defaults to stdout)

Feeds each case's trials, step by step, to a study with Optuna's SuccessiveHalvingPruner
(rule "asha") or MedianPruner (rule "median"), through study.ask / trial.report /
trial.should_prune / study.tell, and writes the keep / stop decision of every report. The test
tests/unit/app/prune_reference_test.cpp writes the cases, runs this script, and replays the same
cases through app/prune/prune_rules.h (docs/PRUNING.md "Differences from Optuna").

CASES.json:
    {"cases": [{"name": "...", "rule": "asha" | "median", "higher_is_better": true,
                "grace_epochs": 1, "eta": 3, "min_cells": 3,
                "trials": [{"values": [0.5, "nan", ...], "end": "complete" | "fail"}, ...],
                "order": [0, 1, 0, ...]}]}
  values[e] is the value at amptune's epoch e (0-based), reported to Optuna as step e + 1 (the
  number of epochs trained), so that Optuna's rung steps min_resource * eta^k and warm-up steps
  are amptune's grace_epochs * eta^k trained epochs. Non-finite values are the strings "nan",
  "inf", "-inf". Each entry of `order` reports the next value of that trial (its first entry
  starts it); entries of a trial that was pruned are skipped. After its last value a trial is
  told COMPLETE (objective 0.0: the pruners read intermediate values only) or FAIL.

OUT.json:
    {"optuna": "5.1.0", "cases": [{"name": "...", "decisions": [[trial, step, true|false], ...],
                                   "promotable": [trial, ...]}]}
  decisions: [trial index, step, stopped] for every report, in order. promotable (asha only):
  the pruned trials that Optuna's own promotion test (_is_trial_promotable_to_next_rung, over
  the values recorded at the rung where each was pruned, its own included) would promote if
  they arrived now; Optuna itself never resumes a pruned trial.
"""
import json
import sys

import optuna
from optuna.pruners import _successive_halving as sh
from optuna.trial import TrialState


def pruner_of(case):
    if case["rule"] == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=case["grace_epochs"],
            reduction_factor=case["eta"],
            min_early_stopping_rate=0,
            bootstrap_count=0,
        )
    if case["rule"] == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=case["min_cells"],
            n_warmup_steps=case["grace_epochs"],
            interval_steps=1,
            n_min_trials=case["min_cells"],
        )
    raise ValueError("unknown rule " + repr(case["rule"]))


def promotable(study, case, pruned_at):
    """Numbers of the pruned trials that would be promoted at the rung where they stopped, if they arrived now."""
    if case["rule"] != "asha":
        return []
    trials = study.get_trials(deepcopy=False)
    out = []
    for number, step in sorted(pruned_at.items()):
        t = trials[number]
        rung = 0
        while case["grace_epochs"] * case["eta"] ** rung < step:
            rung += 1
        key = sh._completed_rung_key(rung)
        if case["grace_epochs"] * case["eta"] ** rung != step or key not in t.system_attrs:
            continue  # pruned on a NaN: Optuna records no value at that rung
        competing = [u.system_attrs[key] for u in trials if key in u.system_attrs]
        if sh._is_trial_promotable_to_next_rung(
            t.system_attrs[key], competing, case["eta"], study.direction
        ):
            out.append(number)
    return out


def run_case(case):
    study = optuna.create_study(
        direction="maximize" if case["higher_is_better"] else "minimize",
        pruner=pruner_of(case),
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    trials = case["trials"]
    live = {}  # trial index -> optuna Trial
    done = set()
    steps = [0] * len(trials)
    pruned_at = {}
    decisions = []
    # Trial numbers follow the order of first reports; map them back to the case's indices.
    number_to_index = {}
    for index in case["order"]:
        if index in done:
            continue
        if index not in live:
            live[index] = study.ask()
            number_to_index[live[index].number] = index
        trial = live[index]
        steps[index] += 1
        step = steps[index]
        trial.report(float(trials[index]["values"][step - 1]), step)
        stop = bool(trial.should_prune())  # MedianPruner answers a numpy bool
        decisions.append([index, step, stop])
        if stop:
            study.tell(trial, state=TrialState.PRUNED)
            pruned_at[trial.number] = step
            done.add(index)
        elif step == len(trials[index]["values"]):
            if trials[index].get("end", "complete") == "fail":
                study.tell(trial, state=TrialState.FAIL)
            else:
                study.tell(trial, 0.0)
            done.add(index)
    promoted = [number_to_index[n] for n in promotable(study, case, pruned_at)]
    return {"name": case["name"], "decisions": decisions, "promotable": sorted(promoted)}


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with open(argv[1]) as f:
        cases = json.load(f)["cases"]
    out = {"optuna": optuna.__version__, "cases": [run_case(c) for c in cases]}
    text = json.dumps(out)
    if len(argv) == 3:
        with open(argv[2], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
