#!/usr/bin/env bash
# Makes (or refreshes) .tmp/embeddings-venv, the Python environment of the test
# embedding server (test/support/embeddings-server.py), from the exact pins in
# test/support/embeddings-requirements.txt, and prints its python's path: see
# python-venv.sh, which does it for every test Python environment.
exec bash "$(dirname "$0")/python-venv.sh" embeddings
