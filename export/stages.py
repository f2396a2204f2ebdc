"""Running an exporter's stages: each announced as it starts (logged, and "step i of n" to the CLI's
progress line)."""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


def stage_announcer(stages: list[str], progress: Callable[[int, int, str], None] | None) -> Callable[[str], None]:
    """What an exporter calls as each of its `stages` begins: logged, and reported as "step i of n"
    to `progress` (the CLI's progress line) when one is given."""

    def stage(label: str) -> None:
        logger.info("export stage: %s", label)
        if progress is not None:
            progress(stages.index(label) + 1, len(stages), label)

    return stage
