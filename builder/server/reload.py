"""Live versions: watch each model's base path, load what the version policy now wants, switch, retire.

TF Serving's `--file_system_poll_wait_seconds` behaviour, in the order that loses no request: a new version
is loaded and warmed off the event loop (requests keep flowing to the old one), then the name's version
map is replaced in one assignment (new requests go to the new set), then each retired version is closed
once the requests that had already resolved it are answered. A version that fails to load is logged and
tried again at the next poll; the versions being served stay as they are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

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
    current = dict(models.models.get(source.name, {}))
    if not wanted or sorted(current) == wanted:
        return False
    loop = asyncio.get_running_loop()
    loaded = dict(current)
    for version in wanted:
        if version not in current:
            log.info("%s: loading version %d from %s", source.name, version, folders[version])
            loaded[version] = await loop.run_in_executor(None, load, source, version, folders[version])
    retired = [loaded.pop(v) for v in list(loaded) if v not in wanted]
    models.set(source.name, loaded, source.labels)
    log.info("%s: serving versions %s", source.name, sorted(loaded))
    for served in retired:
        loop.create_task(retire(served, drain_seconds))
    return True


async def retire(served: ServedModel, drain_seconds: float) -> None:
    """Close a version no request can reach any more, once those that already had it are answered."""
    served.ready = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + drain_seconds
    while served.active and loop.time() < deadline:
        await asyncio.sleep(0.02)
    log.info("%s: version %d unloaded", served.name, served.version)
    served.close()
