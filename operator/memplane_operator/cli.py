"""`memplane-operator`: run the operator (kopf) with settings from the environment.

    MEMPLANE_OPERATOR_ADMIN_TARGET=memplane-admin:50051 \\
    MEMPLANE_OPERATOR_ADMIN_KEY_FILE=/var/run/secrets/memplane/admin-key memplane-operator

Kubernetes credentials: the in-cluster ServiceAccount, else $KUBECONFIG. Peering is off
(`standalone`): run one replica (the chart's Deployment uses strategy Recreate).
Liveness: GET http://<health_host>:<health_port>/healthz.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

import kopf

from memplane_operator.handlers import register
from memplane_operator.settings import OperatorSettings


class _QuietResync(logging.Filter):
    """Drop kopf's INFO line for every successful resync (one per workspace per interval);
    failures and everything the steps log still pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and record.getMessage() == "Timer 'resync' succeeded.")


def parser() -> argparse.ArgumentParser:
    """The command line: no options of its own (everything is configured by environment
    variables, as a Deployment sets them); `--help` lists those variables with their
    descriptions and defaults, from `OperatorSettings`."""
    lines = ["environment variables (MEMPLANE_OPERATOR_<FIELD>):"]
    for name, field in OperatorSettings.model_fields.items():
        default = "" if field.is_required() else f" (default: {field.get_default(call_default_factory=True)!r})"
        lines.append(f"  MEMPLANE_OPERATOR_{name.upper()}{default}\n      {field.description or ''}")
    return argparse.ArgumentParser(
        prog="memplane-operator",
        description="Run memplane's Kubernetes operator (kopf): MemoryWorkspace and SandboxClass reconciled "
        "through the AdminService. Kubernetes credentials: the in-cluster ServiceAccount, else $KUBECONFIG.",
        epilog="\n".join(lines),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `memplane-operator` command (*argv*: the arguments, default
    sys.argv[1:]); returns the exit status. `--help` exits 0 after printing the settings; any
    other argument exits 2 naming it (argparse), before anything connects."""
    parser().parse_args(argv)
    try:
        settings = OperatorSettings()
        settings.read_admin_key()
    except (ValueError, OSError) as error:
        print(f"memplane-operator: {error}", file=sys.stderr)
        return 2
    # log_prefix: every line of an object's handlers names it ([namespace/name]).
    kopf.configure(log_format=kopf.LogFormat.JSON if settings.log_json else kopf.LogFormat.FULL, log_prefix=True)
    logging.getLogger().setLevel(settings.log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # kr8s' client logs every request at INFO
    logging.getLogger("kopf.objects").addFilter(_QuietResync())
    registry = kopf.OperatorRegistry()
    register(registry, settings)
    liveness = f"http://{settings.health_host}:{settings.health_port}/healthz" if settings.health_port else None
    asyncio.run(
        kopf.operator(
            registry=registry,
            standalone=True,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=liveness,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
