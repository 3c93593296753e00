#!/usr/bin/env bash
# Validates the deployment manifests (run by `npm test`):
# - deploy/kubernetes/*.yaml against the Kubernetes API schemas, strictly
#   (unknown fields fail), with kubernetes-validate from PyPI, which ships the
#   schemas (no network at run time);
# - docker-compose.yml parses, takes MEMORY_TYPE from the environment, and
#   gives every Engram replica a healthcheck;
# - docker-compose.yml and deploy/kubernetes/redis.yaml run the Redis image
#   the tests run the Redis store on (test/support/redis-builds-requirements.txt
#   names it).
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
import re
tested = re.search(r"^# image: (\S+)$", open("test/support/redis-builds-requirements.txt").read(), re.M).group(1)
if compose["services"]["redis"]["image"] != tested:
    problems.append(f"redis runs {compose['services']['redis']['image']}, not {tested}, the Redis the tests cover")
k8s_images = [c["image"] for doc in yaml.safe_load_all(open("deploy/kubernetes/redis.yaml")) if doc and doc["kind"] == "StatefulSet" for c in doc["spec"]["template"]["spec"]["containers"]]
if k8s_images != [tested]:
    problems.append(f"deploy/kubernetes/redis.yaml runs {k8s_images}, not [{tested!r}], the Redis the tests cover")
for p in problems:
    print("docker-compose.yml:", p, file=sys.stderr)
if problems:
    sys.exit(1)
print("docker-compose.yml: valid")
PY
