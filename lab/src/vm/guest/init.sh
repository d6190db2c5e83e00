#!/bin/busybox sh
# PID 1 of a meshd test VM (lab/src/vm). Mounts the kernel file systems,
# loads the modules in /etc/meshvm/modules, names and addresses the NICs
# the kernel command line describes (meshvm.nic=MAC,NAME,CIDR), then
# serves the host's commands on the second serial port (agent.sh).
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
mkdir -p /proc /sys /dev /tmp /run /var/log /etc
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r module; do
    insmod "/lib/modules/$module.ko" || echo "meshvm: insmod $module failed"
done </etc/meshvm/modules
ip link set lo up
for arg in $(cat /proc/cmdline); do
    case "$arg" in
    meshvm.hostname=*) hostname "${arg#meshvm.hostname=}" ;;
    meshvm.nic=*)
        spec=${arg#meshvm.nic=}
        mac=${spec%%,*}
        rest=${spec#*,}
        name=${rest%%,*}
        cidr=${rest#*,}
        for dev in /sys/class/net/*; do
            if [ "$(cat "$dev/address")" = "$mac" ]; then
                ip link set "${dev##*/}" name "$name"
            fi
        done
        ip addr add "$cidr" dev "$name"
        ip link set "$name" up
        ;;
    esac
done
stty -F /dev/ttyS1 raw -echo
echo "meshvm: serving commands on ttyS1"
while true; do
    sh /etc/meshvm/agent.sh </dev/ttyS1 >/dev/ttyS1 2>/dev/console
    sleep 1
done
