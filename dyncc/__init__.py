"""dyncc's composition roots: the `dyncc` entry point (cli.py) and the lab and demo (lab/).

The two services below, collector/ (edge host) and controller/ (central), never import each
other; only this package joins them (docs/architecture.md).
"""
