"""The trio the project runs on hands a nursery child's single error to the caller as itself: the sandbox, the
graders and the clients catch errors out of nurseries by type (an `OSError` as a masked infra failure, an
`EngineError` as an engine's), and trio 0.25 made strict exception groups the default, under which each would
arrive inside an exception group instead. pyproject.toml pins trio below 0.25; an environment with a newer one
fails here first, naming the pin, rather than in a grader that lets a host failure escape its episode."""

from __future__ import annotations

import pytest
import trio


async def _child_raises() -> None:
    async def fail() -> None:
        raise OSError("the host's failure")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fail)


def test_a_nursery_childs_single_error_reaches_the_caller_as_itself():
    with pytest.raises(OSError, match="the host's failure"):
        trio.run(_child_raises)


def test_the_check_sees_strict_groups_where_they_are_asked_for():
    """Control: with strict groups (trio >= 0.25's default) the same error arrives grouped."""
    with pytest.raises(BaseExceptionGroup):
        trio.run(_child_raises, strict_exception_groups=True)
