#!/usr/bin/env bash
# Installs what mwinv needs on a Debian bookworm machine: the Debian packages (one list, here),
# then a virtual environment with the package and its test extras. Idempotent: re-running does
# nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the project needs. The PostgreSQL server headers are pinned to the version of the
# installed server so that installing them never upgrades the server under us.
DEBIAN_PACKAGES=(
  trace-cmd
  gcc
  linux-perf
  systemtap-sdt-dev
  postgresql-15-pg-stat-kcache
  postgresql-15-pg-wait-sampling
  postgresql-contrib
  chromium
  mariadb-server
  mariadb-client
  sysbench
  bpftrace
  iproute2
  procps
  pgpool2
  sshfs
  openssh-server
  glusterfs-server
  glusterfs-client
)

need=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
pg_version=$(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null || true)
if [ -z "$pg_version" ]; then
  need+=(postgresql-15)
  dev_pkg=postgresql-server-dev-15
else
  dev_pkg="postgresql-server-dev-15=$pg_version"
  dpkg-query -W -f='${Version}' postgresql-server-dev-15 2>/dev/null | grep -qxF "$pg_version" || need+=("$dev_pkg")
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing Debian packages: ${need[*]}"
  stamp=/var/lib/apt/periodic/mwinv-update-stamp
  if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +1440 2>/dev/null)" ]; then
    apt-get update -qq
    mkdir -p "$(dirname "$stamp")" && touch "$stamp"
  fi
  # Never let a dependency start a service (the packaged MariaDB/PostgreSQL clusters stay down).
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confold "${need[@]}" >/dev/null
fi
# sshd and glusterd run as mwinv's own processes in a cluster's namespaces (docs/storage.md): where this
# script installed them, their packaged services (the host's sshd on port 22, glusterd) stay off
if [ "$(id -u)" = 0 ] && command -v systemctl >/dev/null; then
  for p in "${need[@]}"; do
    case "$p" in
      openssh-server) systemctl disable --now ssh >/dev/null 2>&1 || true ;;
      glusterfs-server) systemctl disable --now glusterd >/dev/null 2>&1 || true ;;
    esac
  done
fi
# pgpool-II runs as mwinv's own process (docs/ntier.md), never as the packaged service
if [ -e /etc/systemd/system/multi-user.target.wants/pgpool2.service ] && [ "$(id -u)" = 0 ]; then
  systemctl disable --now pgpool2 >/dev/null 2>&1 || true
fi

# Kernel tracing needs tracefs; mounting it is harmless where it is already mounted.
if [ ! -e /sys/kernel/tracing/instances ] && [ "$(id -u)" = 0 ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || echo "deps: tracefs could not be mounted (kernel tracing will be skipped)"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.mwinv-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  touch "$stamp"
fi
