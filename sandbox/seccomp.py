"""The workspace seccomp profile: an allowlist tighter than Docker's default.

Docker's default profile still allows ``ptrace`` and ``process_vm_readv/writev``
between processes of one user, ``io_uring``, ``memfd_secret``, handle-based
opens and more. Sandboxed code needs none of those. This profile allows what a
compiler, an interpreter and a test suite use, and answers everything else with
EPERM (ENOSYS for ``clone3`` so glibc falls back to ``clone``, which is filtered
by flags: no new namespaces).
"""

from __future__ import annotations

import json

# Denied on purpose (beyond everything not listed): ptrace, process_vm_readv,
# process_vm_writev, kcmp, pidfd_getfd, process_madvise, io_uring_*, userfaultfd,
# bpf, perf_event_open, keyctl/add_key/request_key, mount/umount/pivot_root,
# unshare/setns, clone with namespace flags, clock_settime/settimeofday/adjtimex,
# name_to_handle_at/open_by_handle_at, fanotify_*, memfd_secret, personality
# changes, socket families other than unix/inet/inet6/netlink, chroot, reboot,
# module and swap calls, acct, quotactl, syslog, kexec, lookup_dcookie, vhangup, and sched_setaffinity,
# sched_setscheduler, sched_setattr: where and how the kernel runs sandboxed code is not its choice (a
# program pinning itself to a busy CPU, then unpinning, would make its own wait look like the host's
# starvation to the grader; docs/tasks.md "Timing model").
ALLOWED = """
accept accept4 access alarm arch_prctl bind brk capget capset chdir chmod chown clock_getres clock_gettime
clock_nanosleep close close_range
connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_pwait
epoll_pwait2 epoll_wait eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2
fadvise64 fallocate fchdir fchmod fchmodat fchown fchownat fcntl fdatasync fgetxattr flistxattr
flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex futex_waitv futimesat getcpu
getcwd getdents getdents64 getegid geteuid getgid getgroups getitimer getpeername getpgid getpgrp
getpid getppid getpriority getrandom getresgid getresuid getrlimit get_robust_list getrusage getsid
getsockname getsockopt gettid gettimeofday getuid getxattr inotify_add_watch inotify_init
inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents io_pgetevents ioprio_get
ioprio_set io_setup io_submit kill lchown lgetxattr link linkat listen listxattr llistxattr lremovexattr lseek
lsetxattr lstat madvise membarrier memfd_create mincore mkdir mkdirat mknod mknodat mlock mlock2
mlockall mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink mremap
msgctl msgget msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat open openat openat2
pause pidfd_open pidfd_send_signal pipe pipe2 poll ppoll prctl pread64 preadv preadv2 prlimit64
pselect6 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg recvmsg
rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask
rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sched_getaffinity
sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler
sched_rr_get_interval sched_yield seccomp select semctl semget semop semtimedop
sendfile sendmmsg sendmsg sendto setfsgid setfsuid setgid setgroups setitimer setpgid setpriority
setregid setresgid setresuid setreuid setrlimit set_robust_list setsid setsockopt set_tid_address
setuid setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 socketpair splice
stat statfs statx symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create
timer_delete timer_getoverrun timer_gettime timer_settime timerfd_create timerfd_gettime
timerfd_settime times tkill truncate umask uname unlink unlinkat utime utimensat utimes vfork
vmsplice wait4 waitid write writev
""".split()

# AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: with --network none only loopback exists.
SOCKET_FAMILIES = (1, 2, 10, 16)
CLONE_NAMESPACE_FLAGS = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
PERSONALITY_ALLOWED = (0, 8, 0x20000, 0x20008, 0xFFFFFFFF)  # query and the harmless flags Docker allows
EPERM, ENOSYS = 1, 38


def profile() -> dict:
    """The profile as Docker's JSON structure."""
    rules: list[dict] = [{"names": sorted(ALLOWED), "action": "SCMP_ACT_ALLOW"}]
    for family in SOCKET_FAMILIES:
        rules.append(
            {
                "names": ["socket"],
                "action": "SCMP_ACT_ALLOW",
                "args": [{"index": 0, "value": family, "op": "SCMP_CMP_EQ"}],
            }
        )
    rules.append(
        {
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        }
    )
    for persona in PERSONALITY_ALLOWED:
        rules.append(
            {
                "names": ["personality"],
                "action": "SCMP_ACT_ALLOW",
                "args": [{"index": 0, "value": persona, "op": "SCMP_CMP_EQ"}],
            }
        )
    rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": rules,
    }


def security_opt(mode: str) -> list[str]:
    """The ``--security-opt seccomp=...`` value for a hardening mode."""
    if mode == "strict":
        return [f"seccomp={json.dumps(profile(), separators=(',', ':'))}"]
    if mode == "unconfined":
        return ["seccomp=unconfined"]
    return []  # docker-default: the daemon's built-in profile
