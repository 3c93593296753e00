#!/usr/bin/env bash
# Validates the deployment manifests (run by `npm test`):
# - deploy/kubernetes/*.yaml against the Kubernetes API schemas, strictly
#   (unknown fields fail), with kubernetes-validate from PyPI, which ships the
#   schemas (no network at run time);
# - docker-compose.yml parses, takes MEMORY_TYPE from the environment, and
#   gives every Engram replica a healthcheck.
# The validator lives in a venv under .tmp, made once and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.tmp/deploy-venv
validator_version=1.37.0
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$validator_version"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$validator_version"
fi
"$venv/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml
echo "kubernetes manifests: valid"
"$venv/bin/python" - <<'PY'
import sys, yaml
compose = yaml.safe_load(open("docker-compose.yml"))
problems = []
replicas = {name: svc for name, svc in compose["services"].items() if name.startswith("engram")}
if not replicas:
    problems.append("no engram replica service")
for name, svc in replicas.items():
    env = {**compose.get("x-engram", {}).get("environment", {}), **svc.get("environment", {})}
    if not str(env.get("MEMORY_TYPE", "")).startswith("${MEMORY_TYPE"):
        problems.append(f"{name}: MEMORY_TYPE is not taken from the environment ({env.get('MEMORY_TYPE')!r})")
    if "test" not in (svc.get("healthcheck") or {}):
        problems.append(f"{name}: no healthcheck")
for p in problems:
    print("docker-compose.yml:", p, file=sys.stderr)
if problems:
    sys.exit(1)
print("docker-compose.yml: valid")
PY
