"""Every shipped example's ``plan --json`` and text into OUT/<example>.{json,txt,rc}, each plan in
a child forked after SGLang is imported (scripts/plan_snapshot.sh runs it once per release).

A child per plan keeps every plan as fresh as its own ``sglang-specinit plan`` process (the
planner clears SGLang's hf config cache around each plan; a child also isolates any state we
do not know of), while the import every plan pays is paid once. Measured identical to one
process per plan on 0.5.13.post1 and 0.5.23, in a third of the time.

    python scripts/plan_examples.py OUT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sglang_specinit.planner import cli


def plan_in_a_child(args: list[str], stdout: Path) -> int:
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        try:
            rc = cli.main(args)
        except SystemExit as stop:
            rc = stop.code if isinstance(stop.code, int) else 1
        sys.stdout.flush()
        os._exit(rc or 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shipped = Path(cli.__file__).parent / "examples"
    examples = sorted(p.name for p in shipped.iterdir() if p.is_dir())
    cli._set_host_cpu_engine()  # what the console script does before its first plan
    import sglang.srt.server_args  # noqa: F401  the import every plan pays, paid once

    for example in examples:
        rc = plan_in_a_child(["plan", "--example", example, "--json"], out / f"{example}.json")
        (out / f"{example}.rc").write_text(f"{rc}\n")
        plan_in_a_child(["plan", "--example", example], out / f"{example}.txt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
