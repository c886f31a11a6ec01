"""mwinv-sample: not yet implemented (see the issue list)."""

import click

from mwinv.cli.common import run_main


@click.command(help=__doc__)
def cli() -> None:
    raise click.ClickException("mwinv-sample is not implemented yet")


def main() -> None:
    run_main(cli, "mwinv-sample")
