#!/usr/bin/env python3
"""Single-rule mutants of the verdict and alerting core, and whether the
whole-cluster simulation's random properties kill each one.

    bench/mutants.py [--cases N] [--only NAME]

Each mutant changes one rule (an exact text replacement in one file). For
every mutant the script checks out HEAD in a scratch worktree, applies the
change (refusing one whose text no longer matches: the list must follow the
code), builds the simulation and runs only its random properties
(`random_fault_schedules_keep_the_verdict_properties`,
`a_fault_beside_a_quiet_one_keeps_the_verdict_properties`,
`a_lossy_cable_at_a_busy_end_keeps_the_verdict_properties`,
`a_cable_cut_at_a_busy_end_keeps_the_verdict_properties` and
`random_rank_faults_are_one_job_hung_page_each`, MESHD_SIM_CASES=N,
default 300), never the hand-written cases. A mutant is killed when a property
fails. It prints a Markdown table (mutant, killed, the first problem seen) for
BENCHMARKS.md, and exits 1 if any mutant survived or did not build.
The scratch worktree and its target directory are removed afterwards.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

# (name, what it breaks, file, text, replacement)
MUTANTS = [
    (
        "silence_doubled",
        "a link's silence must last twice `down_after` to count",
        "model/src/link.rs",
        """            .down_after
            .saturating_add(self.excuse.worst)""",
        """            .down_after
            .saturating_mul(2)
            .saturating_add(self.excuse.worst)""",
    ),
    (
        "suspect_blames_node",
        "a merely suspect end blames its links on the node",
        "model/src/verdict/links.rs",
        ".find(|(_, s)| *s == NodeState::Down)",
        ".find(|(_, s)| *s != NodeState::Up)",
    ),
    (
        "tie_is_quorum",
        "half of the members count as a quorum",
        "model/src/quorum.rs",
        "members.len() * 2 > configured.len()",
        "members.len() * 2 >= configured.len()",
    ),
    (
        "excuse_all_loss",
        "an end that ran late at all excuses every probe lost in the window",
        "model/src/excuse.rs",
        """        if self.late_for.is_zero() || w.sent == 0 || w.window.is_zero() {
            return 0;
        }""",
        """        if self.worst.is_zero() || w.sent == 0 || w.window.is_zero() {
            return 0;
        }
        #[allow(unreachable_code)]
        return w.sent;""",
    ),
    (
        "minority_reconciles",
        "a node without quorum resolves what others posted",
        "model/src/alerts.rs",
        """        if role == Role::Minority || judging {""",
        """        if judging {""",
    ),
    (
        "hearsay_keeps_up",
        "one member hearing a node keeps it up",
        "model/src/verdict/mod.rs",
        "life.heard_by_majority = life.hearers.len() * 2 > voters(id);",
        "life.heard_by_majority = !life.hearers.is_empty() || voters(id) == 0;",
    ),
    (
        "no_restart_grace",
        "a closed stream is a dead node at once",
        "model/src/verdict/nodes.rs",
        "(!open && life.hearers.is_empty() && age >= RESTART_GRACE) || age >= stale_after",
        "(!open && life.hearers.is_empty()) || age >= stale_after",
    ),
    (
        "job_verdict_alone_blocks",
        "a node or link verdict hangs a job whose ranks only wait",
        "model/src/job_mesh.rs",
        "job.blocked.update(waiting && direct, moment.now);",
        "job.blocked.update(waiting, moment.now);",
    ),
    (
        "job_unheard_is_unheard",
        "a rank of a node merely unheard for a moment is unheard, not as last known",
        "model/src/job_mesh.rs",
        "} else if state_of(&seen.node) == Some(NodeState::Down) {",
        "} else {",
    ),
    (
        "job_any_restart",
        "every rank replaced by another process is a restart, never a relaunch",
        "model/src/job_mesh.rs",
        "            if relaunched(job) {",
        "            if false && relaunched(job) {",
    ),
    (
        "job_cause_hops",
        "a second silent rank moves the page to its node",
        "model/src/job_mesh.rs",
        "silent.sort_by_key(|c| (!c.direct, job.cause_node.as_ref() != Some(&c.node)));",
        "silent.sort_by_key(|c| !c.direct);",
    ),
    (
        "events_skip_lost_evidence",
        "a link whose verdict is lost (to unknown) has no event",
        "model/src/events.rs",
        "        (_, LinkState::Unknown) => EventKind::LinkUnknown,",
        "        (_, LinkState::Unknown) => return None,",
    ),
]

PROPERTIES = [
    "random_fault_schedules_keep_the_verdict_properties",
    "a_fault_beside_a_quiet_one_keeps_the_verdict_properties",
    "a_lossy_cable_at_a_busy_end_keeps_the_verdict_properties",
    "a_cable_cut_at_a_busy_end_keeps_the_verdict_properties",
    "random_rank_faults_are_one_job_hung_page_each",
]


def run(cmd, cwd, env=None, capture=True):
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
    )


def first_problem(output):
    for line in output.splitlines():
        if "problems:" in line or "panicked at" in line:
            continue
        stripped = line.strip()
        if stripped[:1].isdigit() and "s:" in stripped[:14]:
            return stripped[:160]
        if stripped.startswith(("LossyCable", "CutCable", "Kill", "Freeze", "Isolate", "Split",
                                "PairCut", "AllLate", "Late", "PeriodicStall", "ClockOffset",
                                "CutManagement", "BlockManagementInbound", "Episode")):
            return stripped[:160]
    return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()

    repo = run(["git", "rev-parse", "--show-toplevel"], os.getcwd()).stdout.strip()
    scratch = tempfile.mkdtemp(prefix="meshd-mutants-")
    tree = os.path.join(scratch, "tree")
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = os.path.join(scratch, "target")
    env["MESHD_SIM_CASES"] = str(args.cases)
    rows = []
    failed = False
    try:
        made = run(["git", "worktree", "add", "--detach", tree, "HEAD"], repo)
        if made.returncode != 0:
            sys.exit(f"git worktree add failed:\n{made.stdout}")
        for name, what, path, text, replacement in MUTANTS:
            if args.only and name not in args.only:
                continue
            run(["git", "checkout", "--", "."], tree)
            file = os.path.join(tree, path)
            with open(file, encoding="utf-8") as f:
                source = f.read()
            if source.count(text) != 1:
                sys.exit(f"{name}: the text to mutate is not once in {path}; update MUTANTS")
            with open(file, "w", encoding="utf-8") as f:
                f.write(source.replace(text, replacement))
            print(f"{name}: building", file=sys.stderr, flush=True)
            test = ["cargo", "test", "--release", "-p", "meshd-model", "--test", "cluster"]
            built = run(test + ["--no-run"], tree, env)
            if built.returncode != 0:
                rows.append((name, what, "did not build", ""))
                failed = True
                continue
            print(f"{name}: running {args.cases} cases", file=sys.stderr, flush=True)
            result = run(test + ["--", "--exact"] + PROPERTIES, tree, env)
            killed = result.returncode != 0
            failed |= not killed
            rows.append((name, what, "killed" if killed else "SURVIVED",
                         first_problem(result.stdout) if killed else ""))
    finally:
        run(["git", "worktree", "remove", "--force", tree], repo)
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"| mutant | what it breaks | random properties ({args.cases} cases each) | first problem |")
    print("|---|---|---|---|")
    for name, what, verdict, problem in rows:
        problem = problem.replace("|", "\\|")
        print(f"| `{name}` | {what} | {verdict} | {problem} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
