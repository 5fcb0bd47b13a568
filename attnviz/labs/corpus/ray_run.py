"""A corpus spread over a Ray cluster (``attnviz corpus --ray ADDRESS``): the executor that
:func:`~attnviz.labs.corpus.run.run_corpus` hands its batches to instead of running them itself.

Each Ray actor opens the model once, from the picklable :class:`~attnviz.models.registry.SourceSpec` (a name, a
folder every node can read, or the embedded model's sizes and seed; never the loaded weights), then runs batches
with ``source.run_statistics``: one actor per GPU where the cluster has GPUs, else one per ``cpus_per_actor`` CPUs.
At most ``in_flight`` batches per actor are out at once, so a corpus of any length holds a bounded number of
batches in the object store and in the driver. An actor that dies (its process killed, its node lost, out of
memory) loses only the batches it held: they are sent again to the others and to the actor started in its place,
and a batch's statistics are yielded once, when its result arrives, so the driver (which writes one part per
batch) never counts one twice. Ray is an optional extra (``pip install attnviz[ray]``): this module imports it
only inside its functions, and nothing else in attnviz imports it.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections import deque
from collections.abc import Iterable, Iterator

from attnviz.errors import ClusterUnavailableError, first_line
from attnviz.i18n.message import msg
from attnviz.models.registry import SourceSpec
from attnviz.models.statistics import TextStatistics

Batch = list[tuple[int, str]]

IN_FLIGHT = 2  # batches out per actor: one running, one waiting in its queue so it never waits for the driver
MAX_TRIES = 3  # sends of one batch before the run gives up on it (a batch that kills every worker it meets)
MAX_REPLACEMENTS = 8  # actors started in place of dead ones before the run gives up on the cluster
CONNECT_TIMEOUT_S = 5.0  # a cluster's head answers at once; a firewall that drops packets, within this
CPU_ONLY = ("cpu", "mps")  # a spec's devices that ask for no GPU ("auto", "cuda", "cuda:N" take the cluster's)


def ray_module():
    """Ray, imported; ClusterUnavailableError saying how to install it where it is not."""
    try:
        import ray
    except ImportError as err:
        raise ClusterUnavailableError(msg("corpus_ray.not_installed")) from err
    return ray


def connect(address: str = "auto") -> bool:
    """Join the Ray cluster at ``address`` ("auto": the one this machine belongs to, as ``ray status`` finds it;
    "HOST:PORT": the head node's GCS port, 6379 unless changed); True when this call connected (the caller
    disconnects), False when this process was already connected. ClusterUnavailableError, one line, when no
    cluster answers."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    try:
        check_reachable(address)
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as err:
        raise ClusterUnavailableError(msg("corpus_ray.unreachable", address=address, reason=first_line(err))) from err
    return True


def check_reachable(address: str) -> None:
    """Raise ConnectionError unless something listens at the cluster's address: Ray's own connect retries an
    address where nothing answers for minutes, so an unreachable one is caught here in seconds. "auto" is found
    as Ray finds it (RAY_ADDRESS, the cluster ``ray start`` last started on this machine)."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    host, _, port = canonicalize_bootstrap_address_or_die(address).rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise ConnectionError(f"nothing answers at {host}:{port} ({first_line(err)})") from err


class StatisticsWorker:
    """The model, opened once in a Ray actor's process, and the batches it runs (a plain class: ``ray.remote``
    wraps it where the executor starts actors, so importing this module needs no Ray)."""

    def __init__(self, spec: SourceSpec, max_tokens: int, threads: int | None) -> None:
        from attnviz.models.registry import open_source

        if threads:  # a CPU actor uses the CPUs Ray gave it, not every core of a node that others share
            import torch

            torch.set_num_threads(threads)
        self.max_tokens = max_tokens
        try:
            self.source, self.error = open_source(spec), None
        except Exception as err:  # kept for the first batch to raise: a failed __init__ reads as a dead actor
            self.source, self.error = None, err

    def run(self, batch: Batch) -> list[TextStatistics]:
        if self.error is not None:
            raise self.error
        return self.source.run_statistics([text for _, text in batch], self.max_tokens)

    def probe(self):
        """The induction probe's rows on this actor's model (attnviz.labs.corpus.run.induction_scores)."""
        if self.error is not None:
            raise self.error
        from attnviz.labs.corpus.run import induction_scores

        return induction_scores(self.source)

    def pid(self) -> int:
        return os.getpid()

    def model_info(self) -> dict:
        if self.error is not None:
            raise self.error
        source, dtype = self.source, getattr(self.source, "dtype", None)
        return {
            "model": source.name,
            "device": str(source.device),
            "implementation": source.implementation,
            "dtype": None if dtype is None else str(dtype).removeprefix("torch."),
        }


@dataclasses.dataclass
class _Slot:
    """One actor of the pool, the batches it holds (result reference -> batch) and, for an actor started in place
    of a dead one, the reference that resolves once it has opened the model (None: it takes batches)."""

    actor: object
    held: dict = dataclasses.field(default_factory=dict)
    starting: object = None


class RayExecutor:
    """Runs a corpus's batches on a Ray cluster: ``run(batches)`` yields ``(batch, statistics)`` as results arrive
    (in any order), each batch once, however many actors die on the way.

    address: "auto" or a cluster's address; spec: the model, its device the user's choice as given ("auto", "cpu",
    "cuda": the workers' devices, not the driver's, which may have no GPU); max_tokens: the cut of each text; gpus:
    None for one actor per GPU where the cluster has GPUs (unless ``spec.device`` is "cpu"), else True or False;
    cpus_per_actor:
    the CPUs each CPU actor takes (its torch threads); n_actors: how many (default: as many as the cluster holds).
    Connects at once (ClusterUnavailableError when it cannot); ``close()`` or a ``with`` block ends it.
    """

    def __init__(
        self,
        address: str,
        spec: SourceSpec,
        max_tokens: int,
        *,
        gpus: bool | None = None,
        cpus_per_actor: int = 1,
        n_actors: int | None = None,
        in_flight: int = IN_FLIGHT,
    ) -> None:
        if cpus_per_actor < 1 or in_flight < 1 or (n_actors is not None and n_actors < 1):
            raise ValueError(msg("corpus_ray.bad_sizes", cpus=cpus_per_actor, in_flight=in_flight, actors=n_actors))
        self.spec, self.max_tokens, self.in_flight = spec, max_tokens, in_flight
        self.cpus_per_actor = cpus_per_actor
        self.connected = connect(address)
        self.ray = ray_module()
        self.slots: list[_Slot] = []
        resources = self.ray.cluster_resources()
        n_gpu = int(resources.get("GPU", 0))
        self.gpus = bool(n_gpu) and not spec.device.startswith(CPU_ONLY) if gpus is None else gpus
        if self.gpus and not n_gpu:
            self.close()
            raise ClusterUnavailableError(msg("corpus_ray.no_gpus", address=address))
        per_cluster = n_gpu if self.gpus else int(resources.get("CPU", 1)) // cpus_per_actor
        self.n_actors = n_actors or max(1, per_cluster)
        options = {"num_gpus": 1, "num_cpus": 1} if self.gpus else {"num_cpus": cpus_per_actor}
        # no restarts by Ray itself: a dead actor's batches are sent again here, where they are counted
        self.worker_class = self.ray.remote(max_restarts=0, max_task_retries=0, **options)(StatisticsWorker)
        self.resent = 0  # batches sent again after their actor died
        self.replaced = 0  # actors started in place of dead ones

    # -- the pool

    def _start_actor(self):
        # the device is the actor's, not the driver's: Ray shows a GPU actor its one GPU alone, as cuda:0
        if self.gpus:
            device = "cuda"
        elif self.spec.device == "auto" or self.spec.device.startswith("cuda"):
            device = "cpu"
        else:
            device = self.spec.device
        spec = dataclasses.replace(self.spec, device=device)
        return self.worker_class.remote(spec, self.max_tokens, None if self.gpus else self.cpus_per_actor)

    def _pool(self) -> list[_Slot]:
        if not self.slots:
            self.slots = [_Slot(self._start_actor()) for _ in range(self.n_actors)]
        return self.slots

    def worker_pids(self, busy_only: bool = False) -> list[int]:
        """The process ids of the actors (those holding a batch, with ``busy_only``): what a test kills."""
        slots = [slot for slot in self._pool() if slot.held or not busy_only]
        return self.ray.get([slot.actor.pid.remote() for slot in slots])

    def model_info(self) -> dict:
        """model (its name), device, implementation and dtype as an actor opened it (for run.json and the
        summary: the driver holds no model)."""
        try:
            return self.ray.get(self._pool()[0].actor.model_info.remote())
        except self.ray.exceptions.RayTaskError as err:
            raise err.cause or err from None

    def probe(self):
        """The induction probe's rows, run once on one actor's model (the driver holds none)."""
        try:
            return self.ray.get(self._pool()[0].actor.probe.remote())
        except self.ray.exceptions.RayTaskError as err:
            raise err.cause or err from None

    # -- the run

    def run(self, batches: Iterable[Batch]) -> Iterator[tuple[Batch, list[TextStatistics]]]:
        """Each batch's statistics, as they arrive; a batch whose actor died is sent again (to any live actor),
        never yielded twice. Closing the iterator early (a stop) leaves nothing running."""
        ray = self.ray
        # the actor's process or node is gone (killed, out of memory, node lost), or the result with it
        dead = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError)
        pending = iter(batches)
        again: deque[tuple[Batch, int]] = deque()  # batches to send again, with how often they were sent
        tries: dict = {}  # result reference -> how often its batch has been sent
        exhausted = False
        try:
            while True:
                exhausted = self._fill(pending, again, tries, exhausted)
                held = [ref for slot in self.slots for ref in slot.held]
                if not held and not again and exhausted:
                    return  # an actor still starting in place of a dead one is not waited for
                starting = [slot.starting for slot in self.slots if slot.starting is not None]
                (ref,), _ = ray.wait(held + starting, num_returns=1)
                slot = next(slot for slot in self.slots if ref in slot.held or ref == slot.starting)
                if ref == slot.starting:
                    try:
                        ray.get(ref)
                        slot.starting = None
                    except dead as err:
                        self._replace(slot, again, tries, err)
                    continue
                batch, sent = slot.held.pop(ref), tries.pop(ref)
                try:
                    statistics = ray.get(ref)
                except ray.exceptions.RayTaskError as err:  # the model's own error (or attnviz's), as it was raised
                    raise err.cause or err from None
                except dead as err:
                    if sent >= MAX_TRIES:
                        raise ClusterUnavailableError(
                            msg("corpus_ray.batch_failed", first=batch[0][0], tries=sent, reason=first_line(err))
                        ) from err
                    again.append((batch, sent))
                    self.resent += 1
                    self._replace(slot, again, tries, err)
                    continue
                yield batch, statistics
        finally:
            self._stop()

    def _fill(self, pending: Iterator[Batch], again: deque, tries: dict, exhausted: bool) -> bool:
        """Send batches (those to send again first) until every actor holds ``in_flight`` (but those still
        starting: a dead actor's batches go to the live ones at once); True once the corpus's batches have all
        been taken."""
        for slot in self._pool():
            while slot.starting is None and len(slot.held) < self.in_flight:
                if again:
                    batch, sent = again.popleft()
                elif not exhausted and (batch := next(pending, None)) is not None:
                    sent = 0
                else:
                    return True
                ref = slot.actor.run.remote(batch)
                slot.held[ref], tries[ref] = batch, sent + 1
        return exhausted

    def _replace(self, slot: _Slot, again: deque, tries: dict, err: Exception) -> None:
        """The dead actor's other batches go to be sent again, and a new actor takes its place; it takes batches
        once it has opened the model (where the cluster has lost the resources for it, the others do the rest)."""
        for ref, batch in slot.held.items():
            again.append((batch, tries.pop(ref)))
            self.resent += 1
        slot.held.clear()
        if self.replaced + 1 > MAX_REPLACEMENTS:
            raise ClusterUnavailableError(
                msg("corpus_ray.too_many_deaths", n=self.replaced + 1, reason=first_line(err))
            )
        self.ray.kill(slot.actor, no_restart=True)
        slot.actor = self._start_actor()
        slot.starting = slot.actor.pid.remote()
        self.replaced += 1

    def _stop(self) -> None:
        for slot in self.slots:
            self.ray.kill(slot.actor, no_restart=True)
        self.slots = []

    def close(self) -> None:
        """Stop the actors, and leave the cluster if this executor joined it."""
        if self.slots:
            self._stop()
        if self.connected:
            self.ray.shutdown()
            self.connected = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
