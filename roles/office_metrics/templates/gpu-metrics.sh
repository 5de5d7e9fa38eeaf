#!/bin/bash
# Managed by provision (roles/office_metrics): this host's GPU readings for node-exporter's textfile
# collector. Run by provision-gpu-metrics.timer; writes DIR/gpu.prom whole or not at all (a temporary
# file in DIR renamed over it: node-exporter reads only *.prom, and a rename is atomic, as its
# textfile collector's documentation asks: https://github.com/prometheus/node_exporter#textfile-collector).
# Usage: gpu-metrics.sh DIR
set -euo pipefail

dir=${1:?usage: gpu-metrics.sh DIR}
query=index,uuid,name,temperature.gpu,power.draw,power.limit,memory.used,memory.total,utilization.gpu
tmp=$(mktemp "$dir/.gpu.prom.XXXXXX")
trap 'rm -f "$tmp"' EXIT

# One line a GPU, the fields in the order asked, ", " between them, "[N/A]" for a reading the GPU has
# not (an H200 has no fan; a laptop GPU may report no power): that reading is left out, not zero.
if csv=$(nvidia-smi --query-gpu="$query" --format=csv,noheader,nounits 2>/dev/null); then
    up=1
else
    up=0
    csv=""
fi

printf '%s\n' "$csv" | awk -v up="$up" '
function label(value) {
    gsub(/\\/, "\\\\", value); gsub(/"/, "\\\"", value); gsub(/\n/, "\\n", value)
    return value
}
function reading(metric, value, scale) {
    if (value !~ /^-?[0-9]+(\.[0-9]+)?$/) return
    samples[metric] = samples[metric] sprintf("%s{gpu=\"%s\",uuid=\"%s\"} %.15g\n", metric, gpu, uuid, value * scale)
}
BEGIN {
    FS = ", "
    n = split("nvidia_gpu_info nvidia_gpu_temperature_celsius nvidia_gpu_power_draw_watts " \
              "nvidia_gpu_power_limit_watts nvidia_gpu_memory_used_bytes nvidia_gpu_memory_total_bytes " \
              "nvidia_gpu_utilization_ratio", order, " ")
    help["nvidia_gpu_info"] = "The GPU, by index, UUID and name (nvidia-smi)."
    help["nvidia_gpu_temperature_celsius"] = "GPU core temperature (nvidia-smi temperature.gpu)."
    help["nvidia_gpu_power_draw_watts"] = "Power drawn by the board (nvidia-smi power.draw)."
    help["nvidia_gpu_power_limit_watts"] = "The power limit in force (nvidia-smi power.limit)."
    help["nvidia_gpu_memory_used_bytes"] = "GPU memory in use (nvidia-smi memory.used)."
    help["nvidia_gpu_memory_total_bytes"] = "GPU memory in all (nvidia-smi memory.total)."
    help["nvidia_gpu_utilization_ratio"] = "Share of the last sample period a kernel ran (nvidia-smi utilization.gpu / 100)."
}
NF >= 9 {
    gpu = label($1); uuid = label($2)
    samples["nvidia_gpu_info"] = samples["nvidia_gpu_info"] \
        sprintf("nvidia_gpu_info{gpu=\"%s\",uuid=\"%s\",name=\"%s\"} 1\n", gpu, uuid, label($3))
    reading("nvidia_gpu_temperature_celsius", $4, 1)
    reading("nvidia_gpu_power_draw_watts", $5, 1)
    reading("nvidia_gpu_power_limit_watts", $6, 1)
    reading("nvidia_gpu_memory_used_bytes", $7, 1048576)
    reading("nvidia_gpu_memory_total_bytes", $8, 1048576)
    reading("nvidia_gpu_utilization_ratio", $9, 0.01)
}
END {
    for (i = 1; i <= n; i++) {
        metric = order[i]
        if (!(metric in samples)) continue
        printf "# HELP %s %s\n# TYPE %s gauge\n%s", metric, help[metric], metric, samples[metric]
    }
    print "# HELP nvidia_smi_up Whether the last nvidia-smi query of the GPUs succeeded."
    print "# TYPE nvidia_smi_up gauge"
    print "nvidia_smi_up " up
}' > "$tmp"

chmod 0644 "$tmp"
mv -f "$tmp" "$dir/gpu.prom"
