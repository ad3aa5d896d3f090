"""Versions switched together across model processes: every poll interval (`reload.poll`), a version set on disk
that differs from the one served is staged in every live process, then served by all at once, or by none
(when one cannot load it: tried again at the next poll). A process that dies meanwhile counts as one that
could not load them; its replacement loads what is served after (`ModelProcesses._start_process`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from builder.server.core import reload
from builder.server.core.model_config import ModelSource, version_folders
from builder.server.process.channel import ChannelClosed
from builder.server.process.messages import Activate, Load, Loaded

log = logging.getLogger("tfsmith.serve")


class ModelProcesses(Protocol):
    """What a switch needs of the front's model processes (`model_processes.ModelProcesses`)."""

    processes: Sequence[Any]  # each with `process` (its pid) and `end` (the front's end of its channel)
    changing: asyncio.Lock  # held by a switch and by a replacement, so that they never overlap

    def live(self) -> list[int]: ...

    async def refresh_healthz(self) -> None: ...


class VersionSwitch:
    """Which versions every model process serves (`active`), and the switch from one set to the next."""

    def __init__(self, sources: tuple[ModelSource, ...]) -> None:
        self.sources = sources
        self.active: dict[str, tuple[int, ...]] = {
            s.name: tuple(s.wanted(list(version_folders(s.base_path)))) for s in sources}

    async def poll(self, processes: ModelProcesses, seconds: float) -> None:
        """Forever: a changed version set on disk switched in every process (one switch at a time, never during
        a replacement: `processes.changing`)."""

        async def bring(source: ModelSource, wanted: tuple[int, ...]) -> None:
            async with processes.changing:
                await self.switch(processes, source.name, wanted)

        await reload.poll(self.sources, seconds, lambda name: self.active.get(name, ()), bring)

    async def switch(self, processes: ModelProcesses, name: str, versions: tuple[int, ...]) -> None:
        """Every live process stages `versions`, then all serve them, or none."""
        taking = [processes.processes[i] for i in processes.live()]
        await asyncio.gather(*(p.end.tell(Load(name, versions)) for p in taking))
        failures = []
        for entry in taking:
            try:
                said = await entry.end.control()
            except ChannelClosed:
                failures.append(f"model process (pid {entry.process.pid}) stopped")
                continue
            if not isinstance(said, Loaded):
                failures.append(f"model process (pid {entry.process.pid}) said {type(said).__name__}")
            elif not said.ok or said.versions != versions:
                failures.append(said.error or f"versions {list(said.versions)} staged")
        commit = not failures
        await asyncio.gather(*(p.end.tell(Activate(name, versions, commit)) for p in taking))
        if commit:
            self.active[name] = versions
            await processes.refresh_healthz()
            log.info("%s: every model process serves versions %s", name, list(versions))
        else:
            log.warning("%s: versions %s not served: %s; still serving %s", name, list(versions), failures[0],
                        list(self.active.get(name, ())))
