#!/usr/bin/env bash
# Install (from Debian's packages, when missing) and start a local PostgreSQL on 127.0.0.1:5432
# with trust auth on loopback and a `test` database: what the PostgreSQL test suites connect to.
# Run as root. Idempotent: a running server is left as it is.
set -euo pipefail

if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    echo "postgres: already running on 127.0.0.1:5432"
else
    if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
        echo "postgres: installing from Debian's packages"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    v=$(ls /usr/lib/postgresql | sort -n | tail -n1)
    # A package install creates the cluster; an image may have the binaries without one.
    pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$v main" || pg_createcluster "$v" main >/dev/null
    # The suites connect as postgres over TCP without a password.
    sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "/etc/postgresql/$v/main/pg_hba.conf"
    pg_ctlcluster --skip-systemctl-redirect "$v" main start
    for _ in $(seq 1 60); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.5; done
    pg_isready -h 127.0.0.1 -p 5432 >/dev/null || { echo "postgres: did not start"; exit 1; }
    echo "postgres: $v started on 127.0.0.1:5432"
fi
psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test"
