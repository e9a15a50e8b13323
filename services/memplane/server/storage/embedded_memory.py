"""Memory settings of the embedded PostgreSQL, derived from the memory it may use.

A user of a local database expects it sized for the machine, not for PostgreSQL's
compiled-in defaults (128 MB of shared_buffers, 4 MB of work_mem: a server for a
512 MB box). From *memory* — `database.embedded_memory_mb`, or by default the machine's
memory (physical, or the container's cgroup limit when that is lower) — the rules
PostgreSQL's documentation gives ("Resource Consumption", "Query Planning") and pgtune
(le0pard/pgtune, its "web application" profile) applies:

- shared_buffers = memory / 4, between 128 MiB (PostgreSQL's default) and 8 GiB: "a
  reasonable starting value for shared_buffers is 25% of the memory"; the cap leaves the
  rest to the kernel's page cache and to the application sharing the machine (the server,
  its embedding model). `database.embedded_shared_buffers_mb` overrides it.
- effective_cache_size = memory * 3/4 (pgtune; the planner's estimate of what the
  kernel and shared_buffers cache together, allocates nothing): with the default 4 GB
  the planner prices an index scan of a 2 GB HNSW index on a smaller box as cached. At most
  PostgreSQL's maximum (2^31 - 1 pages of 8 kB, ~16 TiB): a larger configured memory is
  clamped there rather than written as a value PostgreSQL refuses to start with.
- maintenance_work_mem = memory / 16, between 64 MiB (the default) and 2 GiB (pgtune):
  CREATE INDEX and VACUUM; pgvector builds an HNSW graph fastest when it fits here.
- work_mem = (memory - shared_buffers) / (3 * max_connections), between 4 MiB (the
  default) and 64 MiB (pgtune without its division by parallel workers, capped): per
  sort, hash and bitmap, for the operator's own queries (exports, a large bitmap scan)
  more than for a search: memplane's search statement at 1M memories took the same
  time at 4 and 60 MiB (its sorts and hashes hold at most a few thousand rows).

Every figure in MiB. With `database.dsn` set none of this applies: that server is its
operator's to size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]

MIB = 1024 * 1024
SHARED_BUFFERS_MIN_MB = 128  # PostgreSQL's default
SHARED_BUFFERS_CAP_MB = 8192
MAINTENANCE_WORK_MEM_MIN_MB = 64  # PostgreSQL's default
MAINTENANCE_WORK_MEM_CAP_MB = 2048  # pgtune's cap
WORK_MEM_MIN_MB = 4  # PostgreSQL's default
WORK_MEM_CAP_MB = 64
EFFECTIVE_CACHE_SIZE_MAX_MB = (2**31 - 1) * 8 // 1024  # PostgreSQL's maximum: INT_MAX pages of 8 kB
SHARED_BUFFERS_MAX_MB = (2**30 - 1) * 8 // 1024  # PostgreSQL's maximum: INT_MAX / 2 buffers of 8 kB
MAX_CONNECTIONS = 100  # PostgreSQL's default, which the embedded server keeps
# cgroup v2, then v1: the memory limit of the container this process runs in.
CGROUP_LIMIT_FILES = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


@dataclass(frozen=True)
class ServerMemory:
    """The embedded server's memory settings, MiB each."""

    shared_buffers: int
    effective_cache_size: int
    maintenance_work_mem: int
    work_mem: int

    def config(self) -> dict[str, str]:
        """As server settings (name -> value with unit), for `write_config`."""
        return {
            "shared_buffers": f"{self.shared_buffers}MB",
            "effective_cache_size": f"{self.effective_cache_size}MB",
            "maintenance_work_mem": f"{self.maintenance_work_mem}MB",
            "work_mem": f"{self.work_mem}MB",
        }


def cgroup_limit_mb(files: tuple[Path, ...] | None = None) -> int | None:
    """The cgroup's memory limit in MiB read from the first of *files* (default
    CGROUP_LIMIT_FILES) that exists, or None where there is none (no file, "max", or v1's
    "unlimited", a number near 2^63)."""
    for path in CGROUP_LIMIT_FILES if files is None else files:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text) // MIB
        return None
    return None


def machine_memory_mb() -> int:
    """Memory this process's machine gives it, MiB: physical memory, or the cgroup's
    limit when lower (a container sees the host's physical memory)."""
    physical = int(psutil.virtual_memory().total) // MIB
    limit = cgroup_limit_mb()
    return min(physical, limit) if limit is not None else physical


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def server_memory(memory_mb: int = 0, shared_buffers_mb: int = 0) -> ServerMemory:
    """The settings for a server given *memory_mb* MiB (0: `machine_memory_mb()`), by the
    rules of the module docstring; *shared_buffers_mb* > 0 is taken as it is (the settings
    bound it by SHARED_BUFFERS_MAX_MB)."""
    memory = memory_mb if memory_mb > 0 else machine_memory_mb()
    shared = shared_buffers_mb or _clamp(memory // 4, SHARED_BUFFERS_MIN_MB, SHARED_BUFFERS_CAP_MB)
    return ServerMemory(
        shared_buffers=shared,
        effective_cache_size=min(max(shared, memory * 3 // 4), EFFECTIVE_CACHE_SIZE_MAX_MB),
        maintenance_work_mem=_clamp(memory // 16, MAINTENANCE_WORK_MEM_MIN_MB, MAINTENANCE_WORK_MEM_CAP_MB),
        work_mem=_clamp((memory - shared) // (3 * MAX_CONNECTIONS), WORK_MEM_MIN_MB, WORK_MEM_CAP_MB),
    )
