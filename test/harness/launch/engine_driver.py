"""Child process that owns one ``sglang.Engine`` for :func:`harness.launch.engine.cpu_engine`."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger("harness.launch.engine_driver")


def on_child_sigquit(signum: int, frame: Any) -> None:
    """SIGQUIT handler passed as ``custom_sigquit_handler``: log only, keep this process."""
    logger.error("received SIGQUIT from an SGLang child process (it failed)")


def _send(channel: TextIO, payload: dict[str, Any]) -> None:
    channel.write(json.dumps(payload, default=repr) + "\n")
    channel.flush()


def main(argv: list[str]) -> int:
    """Run the Engine of config file ``argv[1]``; say on stdout whether it is up, then answer each
    stdin command (generate, server_info) in one JSON line."""
    config = json.loads(Path(argv[1]).read_text())
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    log_fd = os.open(config["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    # With SGLANG_LOG_MS on, stamp lines as SGLang does (benchmarks time load_plugins() by it).
    stamped = os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true", "yes")
    log_format = ("[%(asctime)s.%(msecs)03d] " if stamped else "") + logging.BASIC_FORMAT
    datefmt = "%Y-%m-%d %H:%M:%S"
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=log_format, datefmt=datefmt)

    import sglang

    # By its real module name: the spawned scheduler unpickles ServerArgs, which names it.
    from harness.launch.engine_driver import on_child_sigquit as handler

    logger.info("calling sglang.Engine")
    try:
        engine = sglang.Engine(**config["engine_kwargs"], custom_sigquit_handler=handler)
    except BaseException:
        _send(channel, {"event": "error", "traceback": traceback.format_exc()})
        return 1
    _send(channel, {"event": "ready"})
    try:
        for line in sys.stdin:  # one command a line, until the harness ends the process group
            command = json.loads(line)
            try:
                if command["cmd"] == "server_info":
                    result = engine.get_server_info()
                else:
                    prompt, params = command["prompts"], command["sampling_params"]
                    result = engine.generate(prompt=prompt, sampling_params=params)
                _send(channel, {"result": result})
            except BaseException:
                _send(channel, {"error": traceback.format_exc()})
    finally:
        engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
