"""SGLang general-plugin entry point (group ``sglang.srt.plugins``)."""

import logging

logger = logging.getLogger(__name__)


def register() -> None:
    from importlib.metadata import version

    from sglang_specinit import __version__

    logger.info("sglang-specinit %s loaded (sglang %s)", __version__, version("sglang"))
