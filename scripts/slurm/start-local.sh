#!/usr/bin/env bash
# Starts a single-node Slurm on this machine (slurmctld + slurmd on localhost, munge; accounting through
# slurmdbd + MariaDB so that `sacct` works), for scripts/slurm/test-local.sh. Installs nothing: first
#
#   apt-get install slurm-wlm munge slurmdbd mariadb-server     (Debian 12; run as root)
#
# then, as root: scripts/slurm/start-local.sh. It writes /etc/slurm/{slurm,slurmdbd}.conf (refusing to replace
# files it did not write), creates the accounting database, and starts munged, mariadb, slurmdbd, slurmctld and
# slurmd. `scontrol shutdown` and `killall munged slurmdbd` stop them again.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "start-local.sh: run as root (it starts system daemons)" >&2; exit 2; }
for b in munged slurmctld slurmd slurmdbd mysqld; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || { echo "start-local.sh: $b not found; see the header for the apt-get line" >&2; exit 2; }
done
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mark="# written by ragtime scripts/slurm/start-local.sh"
write_conf() { # file, content: never replaces a file someone else wrote
  if [ -e "$1" ] && ! grep -qF "$mark" "$1"; then
    echo "start-local.sh: $1 exists and was not written by this script; leaving it (remove it to let the script write one)" >&2
    exit 2
  fi
  printf '%s\n%s\n' "$mark" "$2" > "$1"
}
mkdir -p /etc/slurm /var/lib/slurm/slurmd /var/lib/slurm/slurmctld /var/log/slurm /run/munge
write_conf /etc/slurm/slurm.conf "ClusterName=local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
write_conf /etc/slurm/slurmdbd.conf "AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db"
chmod 600 /etc/slurm/slurmdbd.conf
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; chmod 400 /etc/munge/munge.key; }
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force
pgrep -x mariadbd >/dev/null || pgrep -x mysqld >/dev/null || { mkdir -p /run/mysqld; chown mysql:mysql /run/mysqld; (mysqld_safe >/dev/null 2>&1 &); }
for _ in $(seq 30); do mysqladmin ping >/dev/null 2>&1 && break; sleep 1; done
mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db"
pgrep -x slurmdbd >/dev/null || /usr/sbin/slurmdbd
sleep 2
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
sleep 2
sacctmgr -i add cluster local >/dev/null 2>&1 || true
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mixed|alloc' && break; sleep 1; done
sinfo
