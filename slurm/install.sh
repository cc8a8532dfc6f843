#!/usr/bin/env bash
# slurm/install.sh -- installs memest's Slurm admission check on a submit host (docs/slurm.md).
#
#   bash slurm/install.sh [--memest PATH] [--bin-dir DIR] [--slurm-conf-dir DIR]
#                         [--config FILE] [--helper-timeout S] [--force]
#
# Installs memest-admit into --bin-dir (default /usr/local/bin), writes cli_filter.lua into
# --slurm-conf-dir (default: the folder of $SLURM_CONF, else /etc/slurm) with the helper's and the
# config's paths filled in, and copies the example config to --config (default
# /etc/memest/admission.conf) unless one is there. It does not edit slurm.conf: add
#   CliFilterPlugins=cli_filter/lua
# yourself (the script prints the line). An existing cli_filter.lua is never overwritten without
# --force (merge ours into it: docs/slurm.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
memest=/usr/local/bin/memest
bin_dir=/usr/local/bin
conf_dir="$(dirname "${SLURM_CONF:-/etc/slurm/slurm.conf}")"
config=/etc/memest/admission.conf
helper_timeout=10
force=0
while (($#)); do
  case "$1" in
    --memest) memest="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --slurm-conf-dir) conf_dir="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --helper-timeout) helper_timeout="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$helper_timeout" =~ ^[0-9]+$ ]] || { echo "install.sh: --helper-timeout must be whole seconds" >&2; exit 2; }
[[ -x "$memest" ]] || echo "install.sh: warning: $memest is not an executable (set memest = in $config)" >&2
if [[ -e "$conf_dir/cli_filter.lua" && $force == 0 ]] && ! grep -q "memest-admit" "$conf_dir/cli_filter.lua"; then
  echo "install.sh: $conf_dir/cli_filter.lua exists and is not memest's; merge slurm/cli_filter.lua into it (docs/slurm.md) or pass --force" >&2
  exit 1
fi
install -d "$bin_dir" "$conf_dir" "$(dirname "$config")"
install -m 0755 "$here/memest-admit" "$bin_dir/memest-admit"
sed -e "s|@MEMEST_ADMIT@|$bin_dir/memest-admit|" -e "s|@MEMEST_ADMISSION_CONF@|$config|" \
    -e "s|@MEMEST_HELPER_TIMEOUT@|$helper_timeout|" "$here/cli_filter.lua" > "$conf_dir/cli_filter.lua.tmp"
chmod 0644 "$conf_dir/cli_filter.lua.tmp"
mv "$conf_dir/cli_filter.lua.tmp" "$conf_dir/cli_filter.lua"
if [[ ! -e "$config" ]]; then
  sed -e "s|^memest = .*|memest = $memest|" "$here/admission.conf.example" > "$config"
  chmod 0644 "$config"
  echo "install.sh: wrote $config (edit the [gpu-types] table for your cluster)"
else
  echo "install.sh: kept the existing $config"
fi
echo "install.sh: installed $bin_dir/memest-admit and $conf_dir/cli_filter.lua"
grep -qs "^[[:space:]]*CliFilterPlugins=.*cli_filter/lua" "$conf_dir/slurm.conf" ||
  echo "install.sh: now add this line to $conf_dir/slurm.conf: CliFilterPlugins=cli_filter/lua"
"$bin_dir/memest-admit" --config "$config" --check-config || {
  echo "install.sh: the config does not match memest yet; fix it and run: $bin_dir/memest-admit --config $config --check-config" >&2
  exit 1
}
