"""Live versions: watch each model's base path, load what the version policy now wants, switch, retire.

TF Serving's `--file_system_poll_wait_seconds` behaviour, in the order that loses no request: a new version
is loaded and warmed off the event loop (requests keep flowing to the old one: `stage`), then the name's
version map is replaced in one assignment (new requests go to the new set: `switch`), then each retired
version is closed once the requests that had already resolved it are answered. A version that fails to load
is logged and tried again at the next poll; the versions being served stay as they are. With model
processes the front decides when (`front.ModelProcesses`): every process stages, and only once all have
does each switch, so no client sees version 2 from one process and then version 1 from another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from builder.measure.cores import release_free_memory
from builder.server.model_config import ModelSource, version_folders
from builder.server.served import ModelSet, ServedModel

log = logging.getLogger("tfsmith.serve")
Loader = Callable[[ModelSource, int, Path], ServedModel]


async def poll(models: ModelSet, sources: Sequence[ModelSource], load: Loader, seconds: float,
               drain_seconds: float, changed: Callable[[], None] = lambda: None) -> None:
    """Forever (until cancelled): every `seconds`, bring each source's served versions to what it wants."""
    while True:
        await asyncio.sleep(seconds)
        for source in sources:
            try:
                if await update(models, source, load, drain_seconds):
                    changed()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a bad version must not stop serving the good ones
                log.warning("%s: reload failed (%s: %s); still serving versions %s", source.name,
                            type(error).__name__, error, sorted(models.models.get(source.name, {})))


async def update(models: ModelSet, source: ModelSource, load: Loader, drain_seconds: float) -> bool:
    """One reconciliation of `source`; True when the served versions changed."""
    folders = version_folders(source.base_path)
    wanted = source.wanted(list(folders))
    if not wanted or sorted(models.models.get(source.name, {})) == wanted:
        return False
    loaded = await stage(models, source, wanted, load)
    switch(models, source, loaded, drain_seconds)
    return True


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
