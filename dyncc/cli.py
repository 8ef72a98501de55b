"""The `dyncc` command: one entry point, subcommands loaded lazily.

Each subcommand lives in its own module, imported only when used (so `dyncc
collect` never loads chDB or pandas), and exposes either
    SETTINGS: a dyncc_common.settings.Settings class, and run(settings) -> int:
        the flags come from SETTINGS.add_arguments(parser); after parsing,
        SETTINGS.from_sources(flags, --config file) builds the checked settings
        (defaults < TOML file < flags); an optional configure(parser) adds more
        structure (sub-parsers) next to the table's flags;
or, without SETTINGS (`dyncc control`, whose action decides which tables apply),
    configure(parser) -> None, building its flags (and --config) from settings
    tables, and run(args) -> int, which turns the parsed flags into those
    settings objects with from_sources() before anything else.
Every bad command line ends with one line on stderr and exit 2: ConfigError and
StoreError from a command, a Kafka client its settings cannot build (e.g. a --kafka-key that
does not match --kafka-cert: dyncc_common.kafka_security.creation_failure), and argparse's
own errors (OneLineParser prints the reason without the usage block).  `dyncc --version` prints the installed version
(package metadata: pyproject.toml `version`) and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from dyncc_common.errors import ConfigError, StoreError  # not controller.store: that imports numpy

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "collect": ("collector.telemetry.cli", "dump TCP sockets over netlink and export TcpInfoBatch batches"),
    "agent": ("collector.agent.cli", "apply signed per-prefix congestion configs as routes (edge)"),
    "ingest": ("controller.ingest.cli", "load batches from Kafka (or files) into ClickHouse/chDB"),
    "access-log": ("controller.ingest.access_log_cli", "load nginx access logs into http_requests (goodput)"),
    "control": ("controller.control.cli", "score prefixes, publish configs, rollouts, kill switch"),
    "report": ("controller.report.cli", "write a self-contained HTML report"),
    "demo": ("dyncc.lab.demo", "run the whole loop on the embedded store (chDB), no servers"),
    "lab": ("dyncc.lab.cli", "build a namespace lab with shaped clients and run the loop"),
    "schema": ("controller.store.cli", "apply the ClickHouse schema migrations"),
}


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), with a pointer to --help.

    Sub-parsers (`dyncc control kill-switch`, ...) inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<10} {desc}" for name, (_, desc) in SUBCOMMANDS.items())
    parser = OneLineParser(
        prog="dyncc",
        description="Dynamic per-prefix congestion control (BBR vs CUBIC) for CDN edges.",
        epilog=f"subcommands:\n{lines}\n\nRun 'dyncc SUBCOMMAND --help' for its options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("subcommand", choices=sorted(SUBCOMMANDS), metavar="SUBCOMMAND")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def build_parser(name: str, module: ModuleType) -> argparse.ArgumentParser:
    """The parser of `dyncc NAME` (its module imported): the SETTINGS table's flags, then configure()."""
    parser = OneLineParser(prog=f"dyncc {name}", description=SUBCOMMANDS[name][1])
    settings_cls = getattr(module, "SETTINGS", None)
    if settings_cls is not None:
        settings_cls.add_arguments(parser)
    if hasattr(module, "configure"):
        module.configure(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        _top_parser().error(f"no subcommand given: one of {', '.join(SUBCOMMANDS)}")
    if args[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0
    if args[0] == "--version":
        from dyncc_common.version import dyncc_version

        print(f"dyncc {dyncc_version()}")
        return 0
    name = args[0]
    if name not in SUBCOMMANDS:
        _top_parser().error(f"unknown subcommand {name!r}")
    module_name = SUBCOMMANDS[name][0]
    if name == "collect":
        # a one-shot collector starts its kernel dump before anything else loads
        from collector.telemetry.start import start_early_prefetch

        start_early_prefetch(args[1:])
    # numpy's OpenBLAS starts a thread per core at import, and they spin for a while after any
    # BLAS call; dyncc does no linear algebra worth it (seen spinning at 3% of an ingest profile,
    # and ~0.1 s of CPU next to a one-shot collector's dump).  Set before any module imports numpy.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    module = importlib.import_module(module_name)
    try:
        parser = build_parser(name, module)
        settings_cls = getattr(module, "SETTINGS", None)
        if settings_cls is not None:
            flags = vars(parser.parse_args(args[1:]))
            settings = settings_cls.from_sources(flags, flags.get("config"))
            return int(module.run(settings) or 0)
        parsed = parser.parse_args(args[1:])
        return int(module.run(parsed) or 0)
    except (ConfigError, StoreError) as exc:
        print(f"dyncc {name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dyncc {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a Kafka client its settings cannot build: a bad configuration too
        from dyncc_common.kafka_security import creation_failure

        reason = creation_failure(exc)
        if reason is None:
            raise
        print(f"dyncc {name}: bad Kafka settings: {reason}", file=sys.stderr)
        return 2
    finally:
        if name == "collect":  # a dump helper the command did not take (refused options, ...)
            from collector.telemetry.start import discard_early_prefetch

            discard_early_prefetch()


if __name__ == "__main__":
    sys.exit(main())
