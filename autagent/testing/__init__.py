"""What the tests, ``make rehearse`` and ``make gpu-check`` stand on: :mod:`.tiny_models`, tiny
random-weight models of every model the paper's configuration loads, built locally (no download)."""
