"""A model server: the served models answering the requests the front hands over, in the front's own process
(`--model-processes 1`) or in a model process of its own (`model_process`).

It loads and warms the models, builds the data plane over them and answers every request through the route
table (`routes.Router`): the same handlers, whichever layout, and no web framework between a request and its
codec. In the front's own process it also runs the version poller (`reload`); in a model process the front
decides when versions change and tells it (`stage`, `activate`). A model server always answers: a failure of its own
becomes a 500 (gRPC INTERNAL), never an exception into the front.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from builder.server.core import reload
from builder.server.config import ServerConfig
from builder.server.core.dataplane import DataPlane
from builder.server.core.loading import load_models, load_version
from builder.server.core.metrics import Metrics
from builder.server.core.runner import BackendPool
from builder.server.routes import Context, Router

log = logging.getLogger("tfsmith.serve")


class ModelServer:
    """The models (loaded and warmed when this is built), answering forwarded requests through the route table."""

    def __init__(self, config: ServerConfig, pool: BackendPool | None = None) -> None:
        self.config = config
        metrics = Metrics()
        self.plane = DataPlane(load_models(config, pool, metrics), metrics)
        self.context = Context(self.plane, config)
        self.router = Router(self.context)
        self.answer = self.router.answer  # what the front (or the channel to it) calls for every request
        self._poller: asyncio.Future[None] | None = None
        self._staged: dict[str, tuple[tuple[int, ...], dict[int, Any]]] = {}

    # --- life ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Ready, and the version poller started where this host decides versions itself (the front's own
        process: model processes are started with polling off, `model_processes`)."""
        config = self.config
        if config.sources and config.poll_seconds > 0:
            bring = reload.in_this_process(self.plane.models, self._load, config.drain_seconds, self._changed)
            self._poller = asyncio.ensure_future(reload.poll(
                config.sources, config.poll_seconds, lambda name: list(self.plane.models.models.get(name, {})),
                bring))
        self.plane.set_ready(True)

    def drain(self) -> None:
        """Not ready from now on (readiness answers 503; requests are still answered)."""
        self.plane.set_ready(False)

    async def stop(self) -> None:
        self.plane.set_ready(False)
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        self.plane.close()

    def _load(self, source: Any, version: int, folder: Any) -> Any:
        return load_version(self.config, source, version, folder, self.plane.metrics)

    def _changed(self) -> None:
        self.context.document = None  # versions are path parameter values in the API document

    # --- versions decided by the front (model processes) ---------------------------------------------------

    async def stage(self, name: str, versions: tuple[int, ...]) -> tuple[bool, str]:
        """Load (off the event loop) and warm the `versions` of model `name` not served yet, to serve them once
        the front says every process has; (False, why) when one cannot be loaded."""
        source = self._source(name)
        try:
            self._staged[name] = (versions, await reload.stage(self.plane.models, source, versions, self._load))
        except Exception as error:  # noqa: BLE001 - the front keeps the versions served now, and says why
            log.warning("%s: versions %s could not be loaded (%s: %s)", name, list(versions), type(error).__name__,
                        error)
            return False, f"{type(error).__name__}: {error}"
        return True, ""

    def activate(self, name: str, versions: tuple[int, ...], commit: bool) -> None:
        """Serve the staged versions (commit), or let them go (another process could not load them)."""
        staged = self._staged.pop(name, None)
        if staged is None or staged[0] != versions:
            return
        if commit:
            reload.switch(self.plane.models, self._source(name), staged[1], self.config.drain_seconds)
            self._changed()
        else:
            reload.discard(self.plane.models, self._source(name), staged[1])

    def _source(self, name: str) -> Any:
        return next(source for source in self.config.sources if source.name == name)

    @property
    def info(self) -> dict[str, Any]:
        """What this host loaded, for the front's start-up line."""
        served = self.plane.models.all()
        return {"models": {s.name: s.version for s in served},
                "model_p50_us": tuple(s.model_p50_us for s in served)}
