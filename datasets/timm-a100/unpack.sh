#!/usr/bin/env bash
# Unpacks the 81 weightless timm training graphs (models.tar.xz, 49 MiB unpacked) into models/
# next to this script, where jobs.csv and models.csv point. Idempotent; models/ is git-ignored.
set -euo pipefail
cd "$(dirname "$0")"
if [[ -f models/.unpacked && models/.unpacked -nt models.tar.xz ]]; then exit 0; fi
tar -xJf models.tar.xz
chmod -R u+w models
touch models/.unpacked
