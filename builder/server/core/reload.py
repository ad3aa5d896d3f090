"""Live versions: watch each model's base path, load what the version policy now wants, switch, retire.

TF Serving's `--file_system_poll_wait_seconds` behaviour, in the order that loses no request: a new version
is loaded and warmed off the event loop (requests keep flowing to the old one: `stage`), then the name's
version map is replaced in one assignment (new requests go to the new set: `switch`), then each retired
version is closed once the requests that had already resolved it are answered. A version that fails to load
is logged and tried again at the next poll; the versions being served stay as they are.

One loop (`poll`) decides when, in either layout; what "bring the served versions to these" means is its
caller's: in the front's own process, `stage` then `switch` (`model_server`); with model processes, the front has every
process stage, and only once all have does each switch (`model_processes.ModelProcesses`), so no client
sees version 2 from one process and then version 1 from another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from builder.measure.cores import release_free_memory
from builder.server.core.model_config import ModelSource, version_folders
from builder.server.core.dataplane import ModelSet, ServedModel

log = logging.getLogger("tfsmith.serve")
Loader = Callable[[ModelSource, int, Path], ServedModel]
#: The versions of a model served now, by name.
Served = Callable[[str], Sequence[int]]
#: Serve these versions of the source's model from now on (or say why not, and keep those served).
Bring = Callable[[ModelSource, tuple[int, ...]], Awaitable[None]]


async def poll(sources: Sequence[ModelSource], seconds: float, served: Served, bring: Bring) -> None:
    """Forever (until cancelled): every `seconds`, each source whose wanted versions differ from those served is
    brought to them; a failure is logged and tried again at the next poll, the versions served stay."""
    while True:
        await asyncio.sleep(seconds)
        for source in sources:
            try:
                wanted = tuple(source.wanted(list(version_folders(source.base_path))))
                if wanted and wanted != tuple(sorted(served(source.name))):
                    await bring(source, wanted)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a bad version must not stop serving the good ones
                log.warning("%s: reload failed (%s: %s); still serving versions %s", source.name,
                            type(error).__name__, error, sorted(served(source.name)))


def in_this_process(models: ModelSet, load: Loader, drain_seconds: float,
                    changed: Callable[[], None] = lambda: None) -> Bring:
    """Bring the models of this process to the wanted versions: the new ones staged, then switched to."""

    async def bring(source: ModelSource, wanted: tuple[int, ...]) -> None:
        loaded = await stage(models, source, wanted, load)
        switch(models, source, loaded, drain_seconds)
        changed()

    return bring


async def stage(models: ModelSet, source: ModelSource, wanted: Sequence[int], load: Loader) -> dict[int, ServedModel]:
    """The versions `wanted` of `source`: those served already, and the others loaded and warmed off the event
    loop (requests keep flowing to the versions served meanwhile)."""
    folders = version_folders(source.base_path)
    current = dict(models.models.get(source.name, {}))
    loop = asyncio.get_running_loop()
    loaded = {v: current[v] for v in wanted if v in current}
    for version in wanted:
        if version not in loaded:
            log.info("%s: loading version %d from %s", source.name, version, folders[version])
            loaded[version] = await loop.run_in_executor(None, load, source, version, folders[version])
    return loaded


def switch(models: ModelSet, source: ModelSource, loaded: dict[int, ServedModel], drain_seconds: float) -> None:
    """Serve exactly `loaded` from now on (one assignment), and retire the versions left out."""
    current = dict(models.models.get(source.name, {}))
    models.set(source.name, loaded, source.labels)
    log.info("%s: serving versions %s", source.name, sorted(loaded))
    loop = asyncio.get_running_loop()
    for version, served in current.items():
        if loaded.get(version) is not served:
            loop.create_task(retire(served, drain_seconds))


def discard(models: ModelSet, source: ModelSource, loaded: dict[int, ServedModel]) -> None:
    """Close staged versions that will not be served after all."""
    current = models.models.get(source.name, {})
    for version, served in loaded.items():
        if current.get(version) is not served:
            served.close()


async def retire(served: ServedModel, drain_seconds: float) -> None:
    """Close a version no request can reach any more, once those that already had it are answered."""
    served.ready = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + drain_seconds
    while served.active and loop.time() < deadline:
        await asyncio.sleep(0.02)
    log.info("%s: version %d unloaded", served.name, served.version)
    served.close()
    release_free_memory()
