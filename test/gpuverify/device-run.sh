#!/usr/bin/env bash
# Runs on a lent GPU machine (see docs/development.md): read-only facts about
# the host, then the verification kit built by `make gpu-verify`. Nothing
# here changes a GPU setting. Output goes to stdout and, when set, to $OUT.
set -uo pipefail
kit=${KIT:-_output/gpu-verify/gpudra-gpu-verify}
out=${OUT:-$(mktemp -d)}
echo "== host"
uname -r; grep PRETTY_NAME /etc/os-release; ldd --version | head -1
echo "== nvidia-smi (read-only queries)"
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,pci.bus_id,mig.mode.current,compute_mode,memory.total --format=csv
echo "== driver files"
for f in /usr/bin/nvidia-cdi-hook /usr/bin/nvidia-ctk /usr/bin/nvidia-smi /usr/bin/nvidia-cuda-mps-control; do
  if [ -e "$f" ]; then echo "present: $f"; else echo "absent:  $f"; fi
done
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /home/kubernetes/bin/nvidia/lib64; do
  find "$d" -maxdepth 1 -name 'libnvidia-ml.so*' 2>/dev/null
done
echo "== PCI NUMA affinity of NVIDIA devices (sysfs numa_node; -1: none published)"
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
  echo "$(basename "$d") class=$(cat "$d/class") numa_node=$(cat "$d/numa_node")"
done
echo "== passthrough and Fabric Manager host facts (read-only)"
echo "kernel command line: $(cat /proc/cmdline)"
echo "IOMMU groups: $(find /sys/kernel/iommu_groups -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)"
echo "vfio modules: $(grep -oE '^vfio[a-z_]*' /proc/modules | tr '\n' ' ')"
echo "/dev/vfio: $(find /dev/vfio -mindepth 1 2>/dev/null | tr "\n" " ")"
for f in nvidia-fabricmanager nv-fabricmanager nvidia-imex nvidia-imex-ctl; do
  if command -v "$f" >/dev/null; then echo "present: $(command -v "$f")"; else echo "absent:  $f"; fi
done
nvidia-smi -q | grep -A6 -i '^ *Fabric' | head -14
echo "== gpudra-gpu-verify"
"$kit" -json --watch="${WATCH:-45s}" > "$out/report.json" 2> "$out/stderr.log"; rc=$?
"$kit" --watch=5s --slices > "$out/report.txt" 2>> "$out/stderr.log"
tail -n 60 "$out/report.txt"
echo "== NVML fidelity table corrections (step 6: a real answer the table's real column does not name)"
grep -A2 'TABLE CORRECTION' "$out/report.txt" || echo "none"
echo "stderr: $(wc -l < "$out/stderr.log") lines, of which logrus-format (time=... level=...): $(grep -c '^time=.* level=' "$out/stderr.log")"
echo "exit status of the JSON run: $rc"
exit $rc
