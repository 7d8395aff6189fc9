/*
 * rollbox-agent: the small native pieces of rollbox's sandboxes.
 *
 *   rollbox-agent template --stage DIR [OPERATION]...
 *       Runs on the host, as root, and builds the root that every sandbox of one runtime shares, in a mount
 *       namespace of its own, which it sends on fd 3 (SCM_RIGHTS) before it exits. The root is a small tmpfs mounted
 *       at DIR (in that namespace only); the operations fill it in order, each DEST an absolute path inside it, made
 *       with its missing parents:
 *           --ro SRC DEST       SRC bound at DEST, recursively, read-only, nosuid, nodev (the runtime, for
 *                               example a Python under /root, which the sandbox's uid could not traverse)
 *           --dev NAME          a node for the host's character device /dev/NAME, mode 0666 (the root is
 *                               the one filesystem of the sandbox without nodev, and it is read-only)
 *           --symlink T DEST    a symbolic link to T
 *           --dir DEST          an empty directory (a mount point: /proc, /workspace, /tmp, ...)
 *       It is then made read-only and pivoted to, the host's tree detached: a pivot_root walks every thread on the
 *       machine, which with thousands of sandboxes open costs milliseconds, and happens once per runtime this way.
 *
 *   rollbox-agent launch --uid U --gid G --id ID --seccomp FD --status FD --stage DIR --root FD
 *                        (--fs FD | --fs-tree FD) [--hostname NAME] [--chdir DIR] [--net none|loopback]
 *                        [OPERATION]... -- CMD...
 *       Runs on the host, as root, and makes the sandbox. Its own mounts are prepared on the host as detached
 *       trees: directories of its writable tree (--fs, the host's detached mount of it; or --fs-tree, a clone the
 *       spawner made of the tree it holds, on kernels that cannot clone a detached mount, which is then attached
 *       in a scratch mount namespace, as for an overlay) and host paths. It then enters the shared root (--root, a
 *       mount namespace made by `template`), makes a copy of it of its own, and attaches them there in order:
 *           --rw SUB DEST       the tree's directory SUB at DEST, nosuid, nodev (directories made below DEST
 *                               belong to the sandbox's uid)
 *           --overlay LOWER UPPER WORK DEST
 *                               an overlayfs: the host directory LOWER, never written, under the tree's
 *                               directory UPPER (WORK its work directory; both in the writable tree, so that
 *                               only what the program writes counts against its size), nosuid, nodev; LOWER's
 *                               owner appears as U and G (an idmapped mount), so that the program may change
 *                               what it was given
 *           --ro SRC DEST       as for template (a runtime below a writable directory)
 *           --devpts DEST       a new instance of devpts, with at most PTYS ptys
 *       It then sets every rlimit of the sandbox's (sandbox_rlimits), clones the sandbox's first process into
 *       new user (U's), pid, ipc, uts, net and cgroup namespaces, maps ID inside to U and G outside, mounts the
 *       sandbox's /proc (see mount_sandbox_proc), and drops to U and G itself, an unprivileged monitor that exits
 *       as that process does. The process makes its mount namespace (a copy of the launcher's, every mount locked),
 *       makes its sysctls read-only (no user namespace allowed), sets the hostname, brings the loopback up with
 *       --net loopback, starts a session, drops every capability, installs the syscall filter read from FD, and
 *       executes CMD as pid 1 with an empty environment, in --chdir. It and the monitor die with their parents;
 *       when it ends, the monitor writes its wait status (an int32) on --status, which nothing in the sandbox
 *       holds. Nothing the launcher mounts is visible to the host.
 *
 *   rollbox-agent serve FD
 *       Runs inside the sandbox as the command the launcher starts. FD is a SOCK_SEQPACKET socket to the
 *       host. A SPARE request (with a sync socket passed as SCM_RIGHTS) forks the next command's process
 *       ahead of its command: it starts a session, announces itself on the sync socket (the kernel attaches
 *       its pid, translated into the host's pid namespace) so that the host places it in the command's
 *       cgroup while the sandbox is idle, and waits, with the command's rlimits already applied. The EXEC
 *       request then arrives on the sync socket (with stdin, stdout and stderr): the child says "x" (the
 *       command starts) and execs it; a closed sync socket instead makes it exit. The agent reports the
 *       child's exit status with the number the host gave its SPARE request (so that a report nobody read is
 *       never taken for a later command's), and exits when the host closes the socket. It is pid 1 of the
 *       sandbox (so no signal from inside kills or stops it) and reaps every orphan at once. It keeps no state between
 *       commands, and keeps serving while a spare waits: a RESET request removes every SysV IPC object of
 *       the sandbox's ipc namespace, between users of a reused sandbox; a ZYGOTE request starts the Python
 *       zygote (zygote.py), which serves SPARE requests on its own socket by forking itself instead of
 *       exec'ing a new interpreter.
 *
 *   rollbox-agent overlay-probe --stage DIR LOWER
 *       Runs on the host, as root: whether an --overlay of LOWER can be made here (overlayfs, an idmapped mount
 *       of LOWER's filesystem, an overlay over it), tried in a private mount namespace on a tmpfs at DIR. Exits
 *       0 when it can; otherwise says why on stderr and exits 1.
 *
 *   rollbox-agent spawner FD
 *       Runs on the host, started once by rollbox, and starts launchers (and the process backend's agents) for
 *       it: a fork copies the parent's whole table of descriptors and the child closes each one it must not
 *       keep, and rollbox holds a few thousand with a thousand sandboxes open. A SPAWN request on FD carries
 *       the command's cwd, argv and env, and as SCM_RIGHTS a reply socket, the command's stderr and the fds it
 *       gets as 3, 4, ...; the reply is the command's pid (or -errno) with its pidfd. A launcher's is run in the
 *       child, without an exec (SPAWN_LAUNCH). The kernel reaps what it starts. It dies with rollbox, and
 *       everything it started dies with it (parent-death signals).
 *       On kernels that cannot clone a detached mount, HOLD keeps a sandbox's writable tree mounted in the
 *       spawner's own mount namespace (made at the first HOLD; what it starts returns to the host's), RELEASE
 *       unmounts it, and a SPAWN may ask for a clone of a held tree as its last fd.
 *
 * The agent is not trusted by the host: it runs as the sandbox's uid, and the program inside can change its
 * priority and limits. Every limit and every measurement that matters is enforced or taken by the host through
 * cgroups.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>
#include <poll.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>

extern char **environ;

/* Wire format, shared with rollbox/sandbox/_agent.py (little-endian, native sizes). */
#define MSG_SPARE 1u          /* a header with the rlimits, one fd: the next command's process's sync socket */
#define MSG_READY 2u
#define MSG_EXITED 3u
#define MSG_RESET 5u          /* remove every SysV IPC object; answered with the same word */
#define MSG_ZYGOTE 4u         /* a header, cwd, argv, env and one fd (the zygote's socket); answered alike */
#define MSG_EXEC 6u           /* on a spare's socket: the command (header rlimits unused), stdin, stdout, stderr */
#define MSG_SPAWN 7u           /* to the spawner: a header, cwd, argv, env; fds: a reply socket, stderr, then fds 3.. */
#define MSG_HOLD 8u            /* to the spawner: a header, a tree's name; fds: a reply socket, the tree */
#define MSG_RELEASE 9u         /* to the spawner: a header, a tree's name; fds: a reply socket */
/* a SPAWN's seq flag: its first env string names a held tree, passed cloned as the last fd */
#define SPAWN_WITH_TREE 1u
#define SPAWN_LAUNCH 2u        /* a SPAWN's seq flag: argv is a launcher's, run in the spawner's child (see spawned) */
#define HELD "/tmp"            /* where held trees are, in the spawner's own mount namespace */
#define MSG_MAX (1u << 20)
#define SPAWN_FDS 8
/* A sandbox's ptys: the machine's pool (kernel.pty.max less kernel.pty.reserve, 3072 by default) is shared by every
 * devpts instance, and without a maximum of its own one sandbox took it all. */
#define PTYS "16"

struct exec_header {          /* followed by cwd\0, argv[0]\0 ..., env[0]\0 ... */
    uint32_t type;
    uint32_t argc;
    uint32_t envc;
    uint32_t seq;             /* SPARE: the host's number for it, echoed in its EXITED report */
    int64_t cpu_time_s;       /* RLIMIT_CPU soft limit; the hard limit is one second more; <0: none */
    int64_t open_files;       /* RLIMIT_NOFILE; <0: inherit */
    int64_t file_size_bytes;  /* RLIMIT_FSIZE; <0: inherit */
};

struct exited_msg {
    uint32_t type;
    int32_t wait_status;      /* as from wait(2); negative: -errno of a failed fork */
    int64_t cpu_us;           /* user + system time of the command and the children it waited for */
    int64_t max_rss_kib;
    uint32_t seq;             /* the SPARE request's: a report is never taken for another command's */
    uint32_t reserved;
};

/* Report a failed step and exit. The errno goes with the C library's words: rollbox says what ran out by it. */
static void die(const char *what) {
    int error = errno;
    dprintf(2, "rollbox-agent: %s: %s (errno %d)\n", what, strerror(error), error);
    _exit(125);
}

/* A root being built (the shared one, see template), or a launcher's copy of it (see launch), with the new mount
 * API (bubblewrap, used before, parsed /proc/self/mountinfo for each mount: a third of a start). */
struct root {
    char path[4096];
    const char *writable[16];  /* the DESTs of --rw: directories made below them belong to the sandbox's uid */
    int nwritable;
    uid_t uid;
    gid_t gid;
};

#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif

struct open_mount_attr {      /* struct mount_attr, which older C libraries do not declare */
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

static int beneath(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

/* Make DEST (absolute, inside the root) and its missing parents, a directory or an empty file, and return an O_PATH
 * descriptor of it. The walk goes by descriptor and never follows a link: below a --rw directory lies what the
 * program left there (a restart keeps its tree), and a link it planted must not lead the launcher, root on the
 * host, out of the root. There, whatever stands where a directory (or the file) must be is the program's own, and
 * is replaced; anywhere else it is an error. What is made below (or at) a --rw directory belongs to the sandbox. */
static int make_path(struct root *r, const char *dest, int file) {
    char rel[4096], walked[4096] = "";
    if (snprintf(rel, sizeof rel, "%s", dest) >= (int)sizeof rel) { errno = ENAMETOOLONG; die(dest); }
    int dir = open(r->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) die(r->path);
    char *save = NULL, *name = strtok_r(rel, "/", &save);
    while (name != NULL) {
        char *next = strtok_r(NULL, "/", &save);
        int leaf = next == NULL && file;
        size_t used = strlen(walked);
        snprintf(walked + used, sizeof walked - used, "/%s", name);
        int sandboxes = 0, below = 0;
        for (int w = 0; w < r->nwritable; w++) {
            sandboxes |= beneath(walked, r->writable[w]);
            below |= beneath(walked, r->writable[w]) && strcmp(walked, r->writable[w]) != 0;
        }
        int fd = -1;
        for (int attempt = 0; fd < 0; attempt++) {
            int made = leaf ? mknodat(dir, name, S_IFREG | 0644, 0) == 0 : mkdirat(dir, name, 0755) == 0;
            if (!made && errno != EEXIST) die(walked);
            if (made && sandboxes && fchownat(dir, name, r->uid, r->gid, AT_SYMLINK_NOFOLLOW) < 0) die(walked);
            struct stat st;
            fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0 || fstat(fd, &st) < 0) die(walked);
            if (leaf ? S_ISREG(st.st_mode) : S_ISDIR(st.st_mode)) break;
            close(fd);
            fd = -1;
            errno = leaf ? EEXIST : ENOTDIR;
            if (!below || attempt > 0) die(walked);
            if (unlinkat(dir, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0) die(walked);
        }
        close(dir);
        dir = fd;
        name = next;
    }
    return dir;
}

/* Bind SRC (recursively) at DEST inside the root, with ATTRS (MOUNT_ATTR_*) set on every mount of it. */
static void bind_into(struct root *r, const char *src, const char *dest, uint64_t attrs) {
    struct stat st;
    if (stat(src, &st) < 0) die(src);
    int target = make_path(r, dest, !S_ISDIR(st.st_mode));
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0) die(src);
    struct open_mount_attr attr = {.attr_set = attrs};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0) die(src);
    if (syscall(SYS_move_mount, tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        die(dest);
    close(tree);
    close(target);
}

/* A user namespace that maps FROM (a uid and a gid) to TO outside, for an idmapped mount: its fd, or -1 (errno
 * set). Made by a child that waits in it while we write its maps, then exits. */
static int idmap_userns(uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid) {
    int wait[2], fd = -1, saved = 0;
    char map[64], path[64];
    if (pipe2(wait, O_CLOEXEC) < 0) return -1;
    pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD | CLONE_NEWUSER, 0, 0, 0, 0);
    if (pid == 0) {
        char c;
        close(wait[1]);
        _exit(read(wait[0], &c, 1) < 0);
    }
    close(wait[0]);
    if (pid > 0) {
        snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)from_uid, (unsigned)to_uid);
        int uid_fd = open(path, O_WRONLY | O_CLOEXEC);
        int ok = uid_fd >= 0 && write(uid_fd, map, strlen(map)) == (ssize_t)strlen(map);
        snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)from_gid, (unsigned)to_gid);
        int gid_fd = ok ? open(path, O_WRONLY | O_CLOEXEC) : -1;
        ok = ok && gid_fd >= 0 && write(gid_fd, map, strlen(map)) == (ssize_t)strlen(map);
        snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
        if (ok) fd = open(path, O_RDONLY | O_CLOEXEC);
        saved = errno;
        if (uid_fd >= 0) close(uid_fd);
        if (gid_fd >= 0) close(gid_fd);
    } else {
        saved = errno;
    }
    close(wait[1]);  /* the child exits */
    if (pid > 0) waitpid(pid, NULL, 0);
    errno = saved;
    return fd;
}

/* Write PATH into BUF escaped for an overlay option (',' separates options, ':' lower layers; '\' escapes). */
static int overlay_path(char *buf, size_t size, const char *path) {
    size_t n = 0;
    for (; *path; path++) {
        if (n + 3 > size) { errno = ENAMETOOLONG; return -1; }
        if (*path == ',' || *path == ':' || *path == '\\') buf[n++] = '\\';
        buf[n++] = *path;
    }
    buf[n] = '\0';
    return 0;
}

/* Mount at TARGET an overlay of LOWER under UPPER (WORK its work directory). LOWER is mounted first at HOLD (a
 * directory of this private mount namespace) read-only and idmapped, its owner seen as UID and GID, and is
 * detached from there once the overlay has taken its own reference. Returns 0, or -1 with errno set and *WHAT
 * naming the step that failed. */
static int mount_overlay(const char *lower, const char *upper, const char *work, const char *target,
                         const char *hold, uid_t uid, gid_t gid, const char **what) {
    struct stat st;
    char options[3 * 4096 + 64], l[4096], u[4096], w[4096];
    *what = lower;
    if (stat(lower, &st) < 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    *what = "an idmapping user namespace";
    int userns = idmap_userns(st.st_uid, st.st_gid, uid, gid);
    if (userns < 0) return -1;
    *what = "open_tree of the workspace";
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, lower, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    struct open_mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                               MOUNT_ATTR_NODEV, .userns_fd = (uint64_t)userns};
    int failed = tree < 0;
    if (!failed) {
        *what = "an idmapped mount of the workspace (its filesystem may not support one)";
        failed = syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0;
    }
    int saved = errno;
    close(userns);
    if (!failed) {
        *what = hold;
        failed = (mkdir(hold, 0700) < 0 && errno != EEXIST) ||
                 syscall(SYS_move_mount, tree, "", AT_FDCWD, hold, MOVE_MOUNT_F_EMPTY_PATH) < 0;
        saved = errno;
    }
    if (tree >= 0) close(tree);
    errno = saved;
    if (failed) return -1;
    *what = "the overlay's options";
    if (overlay_path(l, sizeof l, hold) < 0 || overlay_path(u, sizeof u, upper) < 0 ||
        overlay_path(w, sizeof w, work) < 0) return -1;
    snprintf(options, sizeof options, "lowerdir=%s,upperdir=%s,workdir=%s", l, u, w);
    *what = "an overlay mount (overlayfs)";
    failed = mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, options) < 0;
    saved = errno;
    umount2(hold, MNT_DETACH);  /* the overlay holds a private clone of it */
    errno = saved;
    return failed ? -1 : 0;
}

/* One operation of the shared root's (see template): 0 when ARGV[*I] is none (its arguments consumed otherwise). */
static int root_operation(struct root *r, int argc, char **argv, int *i) {
    const char *op = argv[*i];
    int arity = !strcmp(op, "--ro") || !strcmp(op, "--symlink") ? 2
                : !strcmp(op, "--dir") || !strcmp(op, "--dev")   ? 1
                                                                 : 0;
    if (arity == 0) return 0;
    if (*i + arity >= argc) { dprintf(2, "rollbox-agent: %s needs %d values\n", op, arity); _exit(125); }
    const char *a = argv[*i + 1], *b = arity >= 2 ? argv[*i + 2] : NULL;
    *i += arity;
    if (!strcmp(op, "--ro")) {
        bind_into(r, a, b, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    } else if (!strcmp(op, "--dev")) {  /* a node for the host's device /dev/NAME, mode 0666 */
        char src[4096], target[8192];
        struct stat st;
        snprintf(src, sizeof src, "/dev/%s", a);
        if (stat(src, &st) < 0 || !S_ISCHR(st.st_mode)) die(src);
        close(make_path(r, "/dev", 0));
        snprintf(target, sizeof target, "%s%s", r->path, src);
        if (mknod(target, S_IFCHR | 0666, st.st_rdev) < 0 || chmod(target, 0666) < 0) die(target);
    } else if (!strcmp(op, "--symlink")) {
        char target[8192];
        snprintf(target, sizeof target, "%s%s", r->path, b);
        if (symlink(a, target) < 0) die(target);
    } else {
        close(make_path(r, a, 0));
    }
    return 1;
}

/* A mount of one sandbox's own (see launch), made on the host as a detached tree and attached at DEST once the
 * launcher is in its copy of the shared root: --rw and --overlay from the sandbox's writable tree, --ro from the
 * host (a runtime below a writable directory), --devpts made in place (TREE -1). */
struct prepared {
    const char *op;
    const char *dest;
    int tree;
    int file;
};

#define MAX_PREPARED 32

/* The sandbox's writable tree, below which --rw and --overlay name directories: the host's detached mount, cloned
 * from directly; or, for an overlay or a tree cloned from a held one (kernels that cannot clone a detached mount),
 * that tree attached at STAGE/fs in a scratch mount namespace of the launcher's, left (and so freed) when it
 * enters the shared root's. Returns a descriptor the tree's directories are looked up from. */
static int writable_tree(const char *stage, int fs, int fs_tree, int scratch) {
    if (!scratch) return fs;
    char target[4096];
    if (unshare(CLONE_NEWNS) < 0) die("unshare(CLONE_NEWNS)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make / private");
    if (mount("rollbox-stage", stage, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0) die(stage);
    snprintf(target, sizeof target, "%s/fs", stage);
    if (mkdir(target, 0711) < 0) die(target);
    int tree = fs_tree;
    if (fs >= 0) {
        /* A clone of the host's detached mount: the host keeps its own, to clone again after a restart. */
        tree = (int)syscall(SYS_open_tree, fs, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        if (tree < 0) die(errno == EINVAL ? "open_tree (this kernel cannot clone a detached mount: Linux 6.1 "
                                            "cannot, 6.18 can)" : "open_tree");
        close(fs);
    }
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("move_mount");
    close(tree);
    int base = open(target, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (base < 0) die(target);
    return base;
}

/* A detached clone of the directory SUB of the writable tree BASE, with ATTRS. */
static int clone_below(int base, const char *sub, uint64_t attrs) {
    int tree = (int)syscall(SYS_open_tree, base, sub, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
    if (tree < 0) die(sub);
    struct open_mount_attr attr = {.attr_set = attrs};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) die(sub);
    return tree;
}

/* One operation of the sandbox's own, prepared on the host: 0 when ARGV[*I] is none. */
static int prepare_operation(struct root *r, const char *stage, int base, int argc, char **argv, int *i,
                             struct prepared *out) {
    const char *op = argv[*i];
    int arity = !strcmp(op, "--overlay") ? 4 : !strcmp(op, "--ro") || !strcmp(op, "--rw") ? 2
              : !strcmp(op, "--devpts") ? 1 : 0;
    if (arity == 0) return 0;
    if (*i + arity >= argc) { dprintf(2, "rollbox-agent: %s needs %d values\n", op, arity); _exit(125); }
    const char *a = argv[*i + 1], *b = arity >= 2 ? argv[*i + 2] : NULL;
    *i += arity;
    *out = (struct prepared){.op = op, .dest = argv[*i], .tree = -1};
    if (!strcmp(op, "--rw")) {
        if (r->nwritable == 16) { dprintf(2, "rollbox-agent: too many --rw\n"); _exit(125); }
        out->tree = clone_below(base, a, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        r->writable[r->nwritable++] = out->dest;
    } else if (!strcmp(op, "--overlay")) {
        char upper[4096], work[4096], target[4096], hold[4096];
        const char *what;
        snprintf(upper, sizeof upper, "%s/fs/%s", stage, b);
        snprintf(work, sizeof work, "%s/fs/%s", stage, argv[*i - 1]);
        snprintf(target, sizeof target, "%s/merged", stage);
        snprintf(hold, sizeof hold, "%s/lower", stage);
        if (mkdir(target, 0755) < 0 && errno != EEXIST) die(target);
        if (mount_overlay(a, upper, work, target, hold, r->uid, r->gid, &what) < 0) die(what);
        out->tree = (int)syscall(SYS_open_tree, AT_FDCWD, target, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (out->tree < 0) die(target);
    } else if (!strcmp(op, "--ro")) {
        struct stat st;
        if (stat(a, &st) < 0) die(a);
        out->file = !S_ISDIR(st.st_mode);
        out->tree = (int)syscall(SYS_open_tree, AT_FDCWD, a, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
        if (out->tree < 0) die(a);
        struct open_mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
        if (syscall(SYS_mount_setattr, out->tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0) die(a);
    }
    return 1;
}

/* Attach a prepared mount at its DEST in the launcher's copy of the shared root (below a --rw directory, DEST is
 * made as make_path says). */
static void attach(struct root *r, const struct prepared *p) {
    int target = make_path(r, p->dest, p->file);
    if (p->tree < 0) {  /* --devpts: pseudo-terminals of the sandbox's own, at most PTYS of them */
        const char *options = "newinstance,ptmxmode=0666,mode=0620,max=" PTYS;
        if (mount("devpts", p->dest, "devpts", MS_NOSUID | MS_NOEXEC, options) < 0)
            die(p->dest);
    } else if (syscall(SYS_move_mount, p->tree, "", target, "",
                       MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
        die(p->dest);
    }
    if (p->tree >= 0) close(p->tree);
    close(target);
}

/* What the sandbox's first process is given, besides its root. */
struct sandbox {
    uid_t id;               /* its uid and gid inside, mapped to the launcher's --uid and --gid */
    int seccomp;            /* a descriptor holding the syscall filter's raw program */
    int status;             /* the monitor's: where it reports how the sandbox's init ended */
    int proc;               /* the launcher's: the host's /proc, where it writes the maps */
    int loopback;           /* bring its network namespace's loopback up */
    const char *hostname;
    const char *cwd;
};

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die(path);
    close(fd);
}

static void bring_loopback_up(void) {
    struct ifreq ifr = {0};
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    strcpy(ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0) die("loopback");
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) die("bring loopback up");
    close(s);
}

/* No capability in any set, and none that can come back: the bounding set is emptied while we may. */
static void drop_capabilities(void) {
    for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) die("PR_CAPBSET_DROP");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0) die("PR_CAP_AMBIENT");
}

static void clear_capability_sets(void) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {{0}};
    if (syscall(SYS_capset, &header, data) < 0) die("capset");
}

static void install_filter(int fd) {
    static struct sock_filter program[BPF_MAXINSNS + 1];  /* one more: a longer program is refused, not cut */
    size_t size = 0;
    ssize_t n;
    while (size < sizeof program && (n = read(fd, (char *)program + size, sizeof program - size)) != 0) {
        if (n < 0 && errno != EINTR) die("reading the syscall filter");
        if (n > 0) size += (size_t)n;
    }
    close(fd);
    if (size == 0 || size % sizeof program[0] || size == sizeof program) { errno = EINVAL; die("the syscall filter"); }
    struct sock_fprog filter = {.len = (unsigned short)(size / sizeof program[0]), .filter = program};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("PR_SET_NO_NEW_PRIVS");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter) < 0) die("PR_SET_SECCOMP");
}

/* Every rlimit of the sandbox, whatever rollbox's own process has (a raised RTPRIO would let a program take a CPU
 * with real-time scheduling; a raised MEMLOCK or SIGPENDING pin more kernel memory). Set by the launcher, as root,
 * for its own namespaces, the agent and everything it starts; each command's CPU, file size and open files limits
 * are then set by its own process (see spare). A program can only lower them, except RLIMIT_CORE: 1 means no core
 * file, and also no core_pattern pipe helper (the kernel's convention for a crashing helper); 0 would run the
 * host's helper, as root, for every crash inside. The syscall filter refuses to change it. */
#define INF RLIM_INFINITY
static const struct { int resource; rlim_t soft, hard; } sandbox_rlimits[] = {
    {RLIMIT_CPU, INF, INF},         {RLIMIT_FSIZE, INF, INF},       {RLIMIT_DATA, INF, INF},
    {RLIMIT_STACK, 8 << 20, INF},   {RLIMIT_CORE, 1, 1},            {RLIMIT_RSS, INF, INF},
    {RLIMIT_NPROC, INF, INF},       {RLIMIT_MEMLOCK, 8 << 20, 8 << 20},
    {RLIMIT_AS, INF, INF},          {RLIMIT_LOCKS, INF, INF},       {RLIMIT_SIGPENDING, 4096, 4096},
    {RLIMIT_MSGQUEUE, 0, 0},        {RLIMIT_NICE, 0, 0},            {RLIMIT_RTPRIO, 0, 0},
    {RLIMIT_RTTIME, INF, INF},
    {RLIMIT_NOFILE, 1024, 0},       /* hard: fs.nr_open, so that a command's open_files can be anything */
};

static void set_sandbox_rlimits(int proc) {
    char text[32] = "";
    int fd = openat(proc, "sys/fs/nr_open", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, text, sizeof text - 1) <= 0) die("/proc/sys/fs/nr_open");
    close(fd);
    for (size_t k = 0; k < sizeof sandbox_rlimits / sizeof sandbox_rlimits[0]; k++) {
        int resource = sandbox_rlimits[k].resource;
        struct rlimit want = {sandbox_rlimits[k].soft, sandbox_rlimits[k].hard}, have;
        if (resource == RLIMIT_NOFILE) want.rlim_max = strtoul(text, NULL, 10);
        if (setrlimit(resource, &want) == 0) continue;
        /* Without CAP_SYS_RESOURCE (some containers drop it) no hard limit can be raised: a limit meant to be
         * higher than rollbox's own stays at rollbox's. Lowering always works, and every low one is lowered. */
        if (errno != EPERM || getrlimit(resource, &have) < 0 || have.rlim_max >= want.rlim_max) die("setrlimit");
        want.rlim_max = have.rlim_max;
        if (want.rlim_cur > want.rlim_max) want.rlim_cur = want.rlim_max;
        if (setrlimit(resource, &want) < 0) die("setrlimit");
    }
}

/* The sandbox's init, in its new namespaces but still in the launcher's mount namespace, once the launcher has
 * written its uid and gid maps and mounted its /proc (a byte on SYNC): a mount namespace of its own (a copy of the
 * launcher's, every mount locked in it), no capability, the filter, then CMD. */
static void enter(const struct sandbox *sandbox, int sync, char **cmd) {
    char c;
    static char *no_env[] = {NULL};
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("PR_SET_PDEATHSIG");
    close(sandbox->status);
    close(sandbox->proc);
    if (read(sync, &c, 1) != 1) _exit(125);
    /* No user namespace can be made inside (the filter refuses it too); its sysctls are read-only then. */
    write_file("/proc/sys/user/max_user_namespaces", "0");
    if (unshare(CLONE_NEWNS) < 0) die("unshare(CLONE_NEWNS)");
    if (mount("/proc/sys", "/proc/sys", NULL, MS_BIND | MS_REC, NULL) < 0 ||
        mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        die("/proc/sys");
    if (chdir(sandbox->cwd) < 0) die(sandbox->cwd);
    if (sethostname(sandbox->hostname, strlen(sandbox->hostname)) < 0) die("sethostname");
    if (sandbox->loopback) bring_loopback_up();
    if (setsid() < 0) die("setsid");
    drop_capabilities();
    if (setresgid(sandbox->id, sandbox->id, sandbox->id) < 0) die("setresgid");
    if (setresuid(sandbox->id, sandbox->id, sandbox->id) < 0) die("setresuid");
    clear_capability_sets();
    /* The uid change cleared the parent-death signal; the launcher may have died before it was set again. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("PR_SET_PDEATHSIG");
    struct pollfd hangup = {sync, 0, 0};
    if (poll(&hangup, 1, 0) != 0) _exit(125);
    close(sync);
    install_filter(sandbox->seccomp);
    execve(cmd[0], cmd, no_env);
    die(cmd[0]);
}

/* Close every descriptor from 3 up but the N in KEEP (sorted, ascending). */
static void close_all_but(const int *keep, int n) {
    int from = 3;
    for (int k = 0; k < n; k++) {
        if (keep[k] > from && syscall(SYS_close_range, from, keep[k] - 1, 0) < 0) die("close_range");
        if (keep[k] + 1 > from) from = keep[k] + 1;
    }
    if (syscall(SYS_close_range, from, ~0U, 0) < 0) die("close_range");
}

static int by_value(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* The sandbox's /proc, in the launcher's mount namespace (owned by the host's user namespace, so no check on
 * revealing mounts applies): mounted by a child of ours that enters INIT's pid namespace to do it (proc shows the pid
 * namespace of the process that mounts it), as root on the host, before anything of the sandbox's runs. */
static void mount_sandbox_proc(int proc, pid_t init) {
    char path[64];
    int status;
    snprintf(path, sizeof path, "%d/ns/pid", init);
    int pidns = openat(proc, path, O_RDONLY | O_CLOEXEC);
    if (pidns < 0 || setns(pidns, CLONE_NEWPID) < 0) die("enter the sandbox's pid namespace");
    close(pidns);
    pid_t helper = fork();
    if (helper == 0) {
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) die("mount /proc");
        _exit(0);
    }
    if (helper < 0) die("fork (to mount /proc)");
    while (waitpid(helper, &status, 0) < 0)
        if (errno != EINTR) die("waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) _exit(125);  /* it said why */
}

/* Write the uid and gid maps of INIT's user namespace: ID inside is UID and GID outside, and nothing else. */
static void write_maps(int proc, pid_t init, uid_t id, uid_t uid, gid_t gid) {
    char map[64], path[64];
    int fd;
    const char *names[] = {"uid_map", "setgroups", "gid_map"};
    for (int k = 0; k < 3; k++) {
        if (k == 0) snprintf(map, sizeof map, "%u %u 1\n", (unsigned)id, (unsigned)uid);
        else if (k == 1) snprintf(map, sizeof map, "deny");
        else snprintf(map, sizeof map, "%u %u 1\n", (unsigned)id, (unsigned)gid);
        snprintf(path, sizeof path, "%d/%s", init, names[k]);
        fd = openat(proc, path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, map, strlen(map)) != (ssize_t)strlen(map)) die(path);
        close(fd);
    }
}

static int launch(int argc, char **argv) {
    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    const char *stage = NULL;
    int fs = -1, fs_tree = -1, shared = -1, i;
    struct sandbox sandbox = {.id = (uid_t)-1, .seccomp = -1, .status = -1, .hostname = "", .cwd = "/"};

    /* The options first (the sandbox's operations need them), then the sandbox's operations, then "--". */
    for (i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--uid")) uid = (uid_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--gid")) gid = (gid_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--stage")) stage = argv[i + 1];
        else if (!strcmp(argv[i], "--root")) shared = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fs")) fs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fs-tree")) fs_tree = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--id")) sandbox.id = (uid_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--seccomp")) sandbox.seccomp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--status")) sandbox.status = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--hostname")) sandbox.hostname = argv[i + 1];
        else if (!strcmp(argv[i], "--chdir")) sandbox.cwd = argv[i + 1];
        else if (!strcmp(argv[i], "--net")) sandbox.loopback = !strcmp(argv[i + 1], "loopback");
        else break;
    }
    if (uid == (uid_t)-1 || gid == (gid_t)-1 || stage == NULL || shared < 3 || (fs < 0) == (fs_tree < 0) ||
        sandbox.id == (uid_t)-1 || sandbox.seccomp < 3 || sandbox.status < 3) {
        dprintf(2, "usage: rollbox-agent launch --uid U --gid G --id ID --seccomp FD --status FD --stage DIR "
                   "--root FD (--fs FD | --fs-tree FD) [--hostname NAME] [--chdir DIR] [--net none|loopback] "
                   "[--rw SUB DEST | --overlay LOWER UPPER WORK DEST | --ro SRC DEST | --devpts DEST]... "
                   "-- CMD...\n");
        return 125;
    }
    /* The host's /proc, for the maps of the sandbox's init: there is none in the shared root. */
    sandbox.proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (sandbox.proc < 0) die("/proc");
    int scratch = fs_tree >= 0;
    for (int k = i; k < argc && strcmp(argv[k], "--") != 0; k++) scratch |= !strcmp(argv[k], "--overlay");
    int base = writable_tree(stage, fs, fs_tree, scratch);
    struct root r = {.path = "/", .uid = uid, .gid = gid};
    struct prepared mounts[MAX_PREPARED];
    int n = 0;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (n == MAX_PREPARED) { dprintf(2, "rollbox-agent: too many operations\n"); return 125; }
        if (!prepare_operation(&r, stage, base, argc, argv, &i, &mounts[n++])) {
            dprintf(2, "rollbox-agent: unknown option %s\n", argv[i]);
            return 125;
        }
    }
    if (i + 1 >= argc) { dprintf(2, "rollbox-agent: launch needs -- CMD...\n"); return 125; }
    close(base);
    /* The shared root, read-only and already pivoted to (see template): a copy of it of our own, where the
     * sandbox's own mounts go. No pivot_root per sandbox (each walks every thread on the machine: with thousands
     * of sandboxes open, milliseconds). */
    if (setns(shared, CLONE_NEWNS) < 0) die("enter the sandboxes' shared root");
    close(shared);
    if (unshare(CLONE_NEWNS) < 0) die("unshare(CLONE_NEWNS)");
    for (int k = 0; k < n; k++) attach(&r, &mounts[k]);
    if (setgroups(0, NULL) < 0) die("setgroups");
    int sync[2];
    if (pipe2(sync, O_CLOEXEC) < 0) die("pipe2");
    set_sandbox_rlimits(sandbox.proc);
    /* The sandbox's namespaces, made with root's capabilities (so that no policy on unprivileged user namespaces
     * applies) but as the sandbox's uid: the user namespace is that uid's, and the kernel charges what the sandbox
     * takes of the per-user counters (inotify instances and watches, queued signals, ...) to it, never to root's
     * (one sandbox took all of root's). Its one process outside the sandbox is this monitor, unprivileged. Its
     * mount namespace it makes itself, once its /proc is there. */
    if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP) < 0 || setresuid((uid_t)-1, uid, (uid_t)-1) < 0)
        die("become the sandbox's uid");
    pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
                                             CLONE_NEWNET | CLONE_NEWCGROUP, 0, 0, 0, 0);
    if (pid < 0) die("clone (new namespaces)");
    if (pid == 0) {
        close(sync[1]);
        enter(&sandbox, sync[0], &argv[i + 1]);
    }
    /* The monitor keeps only its sync pipe, its status pipe and /proc: the agent's socket must end when the agent
     * does. */
    close(sync[0]);
    int keep[3] = {sync[1], sandbox.status, sandbox.proc};
    qsort(keep, 3, sizeof keep[0], by_value);
    close_all_but(keep, 3);
    write_maps(sandbox.proc, pid, sandbox.id, uid, gid);
    mount_sandbox_proc(sandbox.proc, pid);
    close(sandbox.proc);
    /* From here on no capability: the uid change below clears them all, now that the fixup is on again. */
    if (prctl(PR_SET_SECUREBITS, 0) < 0) die("PR_SET_SECUREBITS");
    if (setresgid(gid, gid, gid) < 0) die("setresgid");
    if (setresuid(uid, uid, uid) < 0) die("setresuid");
    /* Credential changes clear the parent-death signal: set it again, then see that rollbox's spawner is there. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("PR_SET_PDEATHSIG");
    if (getppid() == 1) _exit(125);
    if (write(sync[1], "x", 1) != 1) die("sync");
    /* sync[1] stays open while we live: the sandbox's init checks it before it starts, as a parent-death
     * signal set there comes too late for a launcher that died earlier. We exit as the sandbox's init did. */
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) die("waitpid");
    /* Its end, on a pipe nothing in the sandbox holds: a sandbox whose init ended with no report here ended with
     * its monitor, which nothing inside can reach (the host's doing, not the program's). */
    int32_t report = status;
    if (write(sandbox.status, &report, sizeof report) < 0) _exit(125);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

/* The root every sandbox of one runtime shares, built once in a mount namespace of its own and pivoted to there (a
 * pivot_root walks every thread on the machine: once per runtime, not once per sandbox), read-only; its mount
 * namespace is sent on fd 3. Each launcher enters it and makes a copy with the sandbox's own mounts. */
static int template(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--stage") != 0) {
        dprintf(2, "usage: rollbox-agent template --stage DIR [--ro SRC DEST | --dev NAME | --symlink TARGET DEST | "
                   "--dir DEST]...\n");
        return 125;
    }
    struct root r = {.uid = 0, .gid = 0};
    snprintf(r.path, sizeof r.path, "%s", argv[3]);
    if (unshare(CLONE_NEWNS) < 0) die("unshare(CLONE_NEWNS)");
    int ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (ns < 0) die("/proc/self/ns/mnt");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make / private");
    /* Not nodev: the device nodes --dev makes live here (read-only, nothing new can be made in it). */
    if (mount("rollbox-root", r.path, "tmpfs", MS_NOSUID, "mode=0755,size=256k,nr_inodes=1024") < 0) die(r.path);
    for (int i = 4; i < argc; i++) {
        if (!root_operation(&r, argc, argv, &i)) {
            dprintf(2, "rollbox-agent: unknown option %s\n", argv[i]);
            return 125;
        }
    }
    /* Only the root itself: what is bound in it keeps its own attributes. */
    if (mount(NULL, r.path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, NULL) < 0) die(r.path);
    /* The host's tree goes with the old root, stacked over the new one by pivot_root and detached. */
    if (chdir(r.path) < 0 || syscall(SYS_pivot_root, ".", ".") < 0) die("pivot_root");
    if (umount2(".", MNT_DETACH) < 0) die("detach the host's root");
    char cbuf[CMSG_SPACE(sizeof ns)];
    char byte = 't';
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof ns);
    memcpy(CMSG_DATA(c), &ns, sizeof ns);
    if (sendmsg(3, &msg, MSG_NOSIGNAL) != 1) die("send the shared root");
    return 0;
}

/* Split a request (header, cwd, argv, env) in place; 0 when it is well formed. */
static int parse_request(char *buf, size_t n, uint32_t type, struct exec_header *h, char **cwd, char ***args,
                         char ***env) {
    char *end = buf + n, *p = buf + sizeof *h;
    if (n < sizeof *h) return -1;
    memcpy(h, buf, sizeof *h);
    if (h->type != type || h->argc == 0 || h->argc > MSG_MAX || h->envc > MSG_MAX) return -1;
    *args = calloc(h->argc + 1, sizeof **args);
    *env = calloc(h->envc + 1, sizeof **env);
    if (!*args || !*env) return -1;
    *cwd = p;
    if (!(p = memchr(p, '\0', (size_t)(end - p)))) return -1;
    p++;
    for (uint32_t k = 0; k < h->argc + h->envc; k++) {
        if (k < h->argc) (*args)[k] = p; else (*env)[k - h->argc] = p;
        if (!(p = memchr(p, '\0', (size_t)(end - p)))) return -1;
        p++;
    }
    return 0;
}

/* What a program of the sandbox's uid can change about the agent (it runs as that uid) and a command would
 * inherit: rlimits, nice, scheduling policy and attributes, CPU affinity, I/O priority, OOM score. Taken when the
 * agent starts serving; a spare that inherited anything else exits before it announces itself, a failed start
 * on which the host restarts the agent, so that no later command runs crippled. */
struct standing {
    struct rlimit limits[RLIM_NLIMITS];
    int nice, policy, ioprio;
    cpu_set_t cpus;
    unsigned char attr[56]; /* struct sched_attr, as the kernel fills it */
    char oom[16];
};
static struct standing serving_standing;

static void take_standing(struct standing *s) {
    memset(s, 0, sizeof *s);
    for (int r = 0; r < RLIM_NLIMITS; r++) getrlimit(r, &s->limits[r]);
    errno = 0;
    s->nice = getpriority(PRIO_PROCESS, 0);
    s->policy = sched_getscheduler(0);
    s->ioprio = (int)syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, 0);
    sched_getaffinity(0, sizeof s->cpus, &s->cpus);
    syscall(SYS_sched_getattr, 0, s->attr, sizeof s->attr, 0);
    int fd = open("/proc/self/oom_score_adj", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, s->oom, sizeof s->oom - 1) < 0) s->oom[0] = '?';
    if (fd >= 0) close(fd);
}

/* The next command's process: take the command's rlimits (the open files limit once its fds are in), announce,
 * wait in its cgroup for the command, become it. Whatever fails before "x" (a crippled agent's limits cannot be
 * raised) shows the host that nothing of the command ran. */
static void spare(int sync, const struct exec_header *limits) {
    static char buf[MSG_MAX];
    struct rlimit rl;
    struct exec_header h;
    char *cwd, **args, **env;
    int fds[3];
    char cbuf[CMSG_SPACE(sizeof fds)];
    struct iovec iov = {buf, sizeof buf};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    sigset_t none;
    struct standing now;
    take_standing(&now);
    if (memcmp(&now, &serving_standing, sizeof now) != 0) _exit(125);  /* a crippled agent: see take_standing */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);  /* the agent blocks SIGCHLD for its signalfd */
    if (setsid() < 0) die("setsid");
    signal(SIGPIPE, SIG_DFL);
    if (dup2(sync, 3) < 0) die("dup2");
    if (syscall(SYS_close_range, 4, ~0U, 0) < 0) die("close_range");
    if (limits->cpu_time_s >= 0) {
        rl.rlim_cur = (rlim_t)limits->cpu_time_s;
        rl.rlim_max = (rlim_t)limits->cpu_time_s + 1;
        if (setrlimit(RLIMIT_CPU, &rl) < 0) die("RLIMIT_CPU");
    }
    if (limits->file_size_bytes >= 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)limits->file_size_bytes;
        if (setrlimit(RLIMIT_FSIZE, &rl) < 0) die("RLIMIT_FSIZE");
    }
    /* No core dump (see sandbox_rlimits): set by the launcher where there is one (then the filter refuses to change
     * it); the process backend's agent has rollbox's own. */
    if (getrlimit(RLIMIT_CORE, &rl) == 0 && (rl.rlim_cur != 1 || rl.rlim_max != 1)) {
        rl.rlim_cur = rl.rlim_max = 1;
        setrlimit(RLIMIT_CORE, &rl);
    }
    /* The host reads our pid from SCM_CREDENTIALS and places us in the command's cgroup before it answers. */
    if (send(3, "r", 1, 0) != 1) _exit(125);
    ssize_t n = recvmsg(3, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) _exit(125);  /* not needed after all: the host closed the socket */
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c == NULL || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof fds) ||
        parse_request(buf, (size_t)n, MSG_EXEC, &h, &cwd, &args, &env) < 0) {
        dprintf(2, "rollbox-agent: malformed command\n");
        _exit(125);
    }
    memcpy(fds, CMSG_DATA(c), sizeof fds);
    for (int i = 0; i < 3; i++)
        if (dup2(fds[i], i) < 0) die("dup2");
    if (syscall(SYS_close_range, 4, ~0U, 0) < 0) die("close_range");
    /* Only now, with the command's fds in place: a limit of a few files must not keep them from arriving. A
     * crippled agent's lower limit fails here, before "x": a failed start. */
    if (limits->open_files >= 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)limits->open_files;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) die("RLIMIT_NOFILE");
    }
    /* From here on the command runs: what ends it is the command's own result, not a failed start. */
    if (send(3, "x", 1, 0) != 1) _exit(125);
    close(3);
    if (chdir(cwd) < 0) {
        dprintf(2, "rollbox: cannot enter %s: %s\n", cwd, strerror(errno));
        _exit(126);
    }
    environ = env;  /* execvp searches the PATH of the new environment, not the agent's */
    execvp(args[0], args);
    dprintf(2, "rollbox: cannot execute %s: %s\n", args[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

/* SysV IPC objects outlive the processes that made them, in the sandbox's ipc namespace; a sandbox that serves
 * again must not hand them to its next user. The *_STAT_ANY commands see objects whatever their mode. */
static void remove_ipc_objects(void) {
    struct shm_info shm_info;
    struct seminfo sem_info;
    struct msginfo msg_info;
    union {
        int val;
        struct semid_ds *buf;
        unsigned short *array;
        struct seminfo *info;
    } arg;
    int max = shmctl(0, SHM_INFO, (struct shmid_ds *)(void *)&shm_info);
    for (int i = 0; i <= max; i++) {
        struct shmid_ds ds;
        int id = shmctl(i, SHM_STAT_ANY, &ds);
        if (id >= 0) shmctl(id, IPC_RMID, NULL);
    }
    arg.info = &sem_info;
    max = semctl(0, 0, SEM_INFO, arg);
    for (int i = 0; i <= max; i++) {
        struct semid_ds ds;
        arg.buf = &ds;
        int id = semctl(i, 0, SEM_STAT_ANY, arg);
        if (id >= 0) semctl(id, 0, IPC_RMID);
    }
    max = msgctl(0, MSG_INFO, (struct msqid_ds *)(void *)&msg_info);
    for (int i = 0; i <= max; i++) {
        struct msqid_ds ds;
        int id = msgctl(i, MSG_STAT_ANY, &ds);
        if (id >= 0) msgctl(id, IPC_RMID, NULL);
    }
}

/* Start a long-lived helper (the Python zygote) that speaks this same protocol on its own socket, passed as fd
 * 3. Like the agent it is infrastructure, not a command: it runs outside every command's cgroup and limits. */
static void start_zygote(int sock, int fd, char *cwd, char **args, char **env) {
    uint32_t answer = MSG_ZYGOTE;
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* dup2 onto itself keeps close-on-exec, which the received fd has: clear it then. */
        if ((fd == 3 ? fcntl(3, F_SETFD, 0) : dup2(fd, 3)) < 0) die("fd 3");
        if (syscall(SYS_close_range, 4, ~0U, 0) < 0) die("close_range");
        if (chdir(cwd) < 0) die(cwd);
        environ = env;
        execvp(args[0], args);
        die(args[0]);
    }
    close(fd);
    if (pid < 0) answer = 0;
    send(sock, &answer, sizeof answer, MSG_NOSIGNAL);
}

/* Reap every ended child (as pid 1 of the sandbox, orphans are ours too); report the command's exit. Returns
 * how many were reaped, or -1 when the host is gone. */
static int reap(int sock, pid_t *command, uint32_t seq) {
    int status, reaped = 0;
    struct rusage ru;
    pid_t pid;
    while ((pid = wait4(-1, &status, WNOHANG, &ru)) > 0) {
        reaped++;
        if (pid != *command) continue;  /* an orphan, or a zygote that ended */
        struct exited_msg m = {MSG_EXITED, status,
                               (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                                   ru.ru_utime.tv_usec + ru.ru_stime.tv_usec,
                               ru.ru_maxrss, seq, 0};
        *command = 0;
        if (send(sock, &m, sizeof m, MSG_NOSIGNAL) < 0) return -1;
    }
    return reaped;
}

/* Stop serving with CODE, once the command (or the spare) is gone: killed and reaped, so that our end follows its
 * end. Where we are no sandbox's pid 1 (the process backend) it would outlive us otherwise, an orphan ending in its
 * own time after the host, which saw us end, counted the sandbox closed. */
static int stop_serving(pid_t command, int code) {
    if (command > 0) {
        kill(command, SIGKILL);
        while (waitpid(command, NULL, 0) < 0 && errno == EINTR) {}
    }
    return code;
}

static int serve(int sock) {
    static char buf[MSG_MAX];
    uint32_t ready = MSG_READY;
    pid_t command = 0;  /* the spare, or the command it became: one at a time */
    uint32_t seq = 0;   /* its SPARE request's number */
    sigset_t chld;
    struct signalfd_siginfo info;
    prctl(PR_SET_DUMPABLE, 0);  /* keep the program inside away from our fds through /proc */
    if (fcntl(sock, F_SETFD, FD_CLOEXEC) < 0) die("control socket");
    take_standing(&serving_standing);
    /* A child's end wakes us through a signalfd: the command's, to report it, and any orphan's, to reap it at
     * once (an unreaped one would count against the next command's pids limit). Not a child's stop or
     * continue (SA_NOCLDSTOP): a program stopping and continuing an orphan would wake us for nothing. */
    struct sigaction on_child = {.sa_handler = SIG_DFL, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGCHLD, &on_child, NULL) < 0) die("sigaction");
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0) die("sigprocmask");
    int children = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (children < 0) die("signalfd");
    if (send(sock, &ready, sizeof ready, MSG_NOSIGNAL) < 0) die("send ready");
    for (;;) {
        int fd;
        char cbuf[CMSG_SPACE(sizeof fd)];
        struct iovec iov = {buf, sizeof buf};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
        struct pollfd polled[2] = {{.fd = sock, .events = POLLIN}, {.fd = children, .events = POLLIN}};
        if (poll(polled, 2, -1) < 0) {
            if (errno == EINTR) continue;
            die("poll");
        }
        while (read(children, &info, sizeof info) == sizeof info) {}
        int reaped = reap(sock, &command, seq);
        if (reaped < 0) return stop_serving(command, 0);
        if (!polled[0].revents) {
            /* A SIGCHLD that ended no child was (but for one coalesced with another) sent by a program: kill,
             * or a file's owner signal through F_SETOWN. A flood of them must not have us burn CPU outside every
             * command's accounting: for a millisecond only the host is listened to (its requests wait for
             * nothing), at most a thousand such wakeups a second. */
            if (reaped == 0) poll(polled, 1, 1);
            continue;
        }
        ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (n == 0) return stop_serving(command, 0);
        if (n < 0) { if (errno == EINTR) continue; die("recvmsg"); }
        uint32_t type;
        if ((size_t)n < sizeof type) return stop_serving(command, 125);
        memcpy(&type, buf, sizeof type);
        if (type == MSG_RESET && n == sizeof type) {
            remove_ipc_objects();
            if (send(sock, &type, sizeof type, MSG_NOSIGNAL) < 0) return stop_serving(command, 0);
            continue;
        }
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        if (c == NULL || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof fd)) {
            dprintf(2, "rollbox-agent: malformed request\n");
            return stop_serving(command, 125);
        }
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
        if (type == MSG_ZYGOTE) {
            struct exec_header h;
            char *cwd, **args, **env;
            if (parse_request(buf, (size_t)n, MSG_ZYGOTE, &h, &cwd, &args, &env) < 0)
                return stop_serving(command, 125);
            start_zygote(sock, fd, cwd, args, env);
            free(args);
            free(env);
            continue;
        }
        struct exec_header limits;
        if (type != MSG_SPARE || (size_t)n != sizeof limits || command) {
            dprintf(2, "rollbox-agent: malformed request\n");
            return stop_serving(command, 125);
        }
        memcpy(&limits, buf, sizeof limits);
        pid_t pid = fork();
        if (pid == 0) spare(fd, &limits);
        close(fd);
        if (pid > 0) {
            command = pid;
            seq = limits.seq;
            continue;
        }
        struct exited_msg m = {MSG_EXITED, -errno, 0, 0, limits.seq, 0};
        if (send(sock, &m, sizeof m, MSG_NOSIGNAL) < 0) return stop_serving(command, 0);
    }
}

/* The arguments this program was started with, after its path, as one area of memory (see named_as_launcher). */
static char *own_args = NULL;
static size_t own_args_size = 0;

/* Show a launcher run in the spawner's child as one (ps, /proc/PID/cmdline: "AGENT launch"): its arguments, which
 * it shares with the spawner's until it writes them, say "launch" instead of "spawner 3". */
static void named_as_launcher(void) {
    if (own_args != NULL && own_args_size > strlen("launch")) {
        memset(own_args, 0, own_args_size);
        memcpy(own_args, "launch", strlen("launch"));
    }
}

/* The spawner's mount namespace, made at its first HOLD, and the host's, which everything it starts returns to. */
static int host_mounts = -1;
static int holding = 0;  /* the tmpfs for held trees is mounted, in the spawner's own namespace */

static int held_path(char *path, size_t size, const char *name) {
    if (!*name || strspn(name, "0123456789abcdef") != strlen(name)) { errno = EINVAL; return -1; }
    if (snprintf(path, size, HELD "/%s", name) >= (int)size) { errno = ENAMETOOLONG; return -1; }
    return 0;
}

/* The child of a SPAWN request: stdin and stdout are the spawner's (/dev/null), FDS[1] becomes stderr, FDS[2..]
 * become 3, 4, ..., and a clone of the held tree TREE (if named) the next (all through copies above them all, so
 * that no target overwrites a source); nothing else stays. It runs in the host's mount namespace. With LAUNCH,
 * ARGS are a launcher's (rollbox-agent launch ...), run here without an exec: a second start of this program
 * (its dynamic linking, the C library's probing of the CPU) for each sandbox would cost more than the rest of its
 * launcher's work. */
static void spawned(int *fds, int nfds, const char *tree, const char *cwd, int launching, int argc, char **args,
                    char **env) {
    int copies[SPAWN_FDS + 1];
    char path[4096];
    signal(SIGCHLD, SIG_DFL);  /* an ignored signal stays ignored across exec */
    for (int k = 1; k < nfds; k++)
        if ((copies[k] = fcntl(fds[k], F_DUPFD_CLOEXEC, 64)) < 0) die("F_DUPFD");
    if (tree != NULL) {
        if (!holding) errno = EINVAL;
        if (!holding || held_path(path, sizeof path, tree) < 0) die(tree);
        int flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE;
        if ((copies[nfds] = (int)syscall(SYS_open_tree, AT_FDCWD, path, flags)) < 0) die(path);
        nfds++;
    }
    if (host_mounts >= 0 && setns(host_mounts, CLONE_NEWNS) < 0) die("setns");
    for (int k = 1; k < nfds; k++)
        if (dup2(copies[k], k == 1 ? 2 : k + 1) < 0) die("dup2");
    if (syscall(SYS_close_range, nfds + 1, ~0U, 0) < 0) die("close_range");
    if (chdir(cwd) < 0) die(cwd);
    environ = env;
    if (launching) {
        named_as_launcher();
        _exit(launch(argc, args));
    }
    execv(args[0], args);
    int error = errno;
    dprintf(2, "rollbox-agent: cannot execute %s: %s (errno %d)\n", args[0], strerror(error), error);
    _exit(127);
}

/* Keep a sandbox's writable tree mounted in the spawner's own mount namespace, for kernels that cannot clone a
 * detached mount: never in the host's (each new namespace copies the host's whole table), and gone with the
 * spawner however it ends. */
static int hold(const char *name, int tree) {
    char path[4096];
    if (host_mounts < 0) {
        int host = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        if (host < 0) return -errno;
        if (unshare(CLONE_NEWNS) < 0) {
            int error = -errno;
            close(host);
            return error;
        }
        host_mounts = host;
    }
    if (!holding) {  /* never a directory on the host's HELD: only in a tmpfs of our own */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return -errno;
        if (mount("rollbox-held", HELD, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") < 0) return -errno;
        holding = 1;
    }
    if (held_path(path, sizeof path, name) < 0 || mkdir(path, 0700) < 0) return -errno;
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
        int error = -errno;
        rmdir(path);
        return error;
    }
    return 0;
}

static int release(const char *name) {
    char path[4096];
    if (!holding) return -EINVAL;  /* HELD is the host's then: nothing there is ours */
    if (held_path(path, sizeof path, name) < 0 || umount2(path, MNT_DETACH) < 0 || rmdir(path) < 0) return -errno;
    return 0;
}

/* Send VALUE (and FD) on REPLY; whether the caller got it (a caller that gave up has shut its end). */
static int answer(int reply, int32_t value, int fd) {
    char cbuf[CMSG_SPACE(sizeof fd)];
    struct iovec iov = {&value, sizeof value};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof cbuf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof fd);
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(reply, &msg, MSG_NOSIGNAL) >= 0;
}

static int spawner(int sock) {
    static char buf[MSG_MAX];
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("PR_SET_PDEATHSIG");
    if (fcntl(sock, F_SETFD, FD_CLOEXEC) < 0) die("control socket");
    /* A killed launcher leaves the sandbox's init to be reaped: as a subreaper we get it, and reap it, where
     * a host pid 1 might never (as in many containers). */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) die("PR_SET_CHILD_SUBREAPER");
    /* What we start gets every signal's default action and mask, not rollbox's: Python ignores SIGPIPE and
     * SIGXFSZ, and glibc's posix_spawn ignores its two internal signals, which its signal() will not reset. The
     * kernel reaps what we start, and rollbox watches it through the pidfd we send. */
    struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; } default_action = {0};
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int sig = 1; sig <= 64; sig++)
        syscall(SYS_rt_sigaction, sig, &default_action, NULL, sizeof default_action.mask);
    signal(SIGCHLD, SIG_IGN);
    for (;;) {
        int fds[SPAWN_FDS];
        char cbuf[CMSG_SPACE(sizeof fds)];
        struct iovec iov = {buf, sizeof buf - 1};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
        ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (n == 0) return 0;
        if (n < 0) { if (errno == EINTR) continue; die("recvmsg"); }
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        int nfds = c != NULL && c->cmsg_type == SCM_RIGHTS ? (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int)) : 0;
        struct exec_header h;
        if (nfds < 1 || (size_t)n < sizeof h) {
            dprintf(2, "rollbox-agent: malformed spawner request\n");
            return 125;
        }
        memcpy(fds, CMSG_DATA(c), (size_t)nfds * sizeof(int));
        memcpy(&h, buf, sizeof h);
        buf[n] = '\0';
        if (h.type == MSG_HOLD || h.type == MSG_RELEASE) {
            const char *name = buf + sizeof h;
            answer(fds[0], h.type == MSG_RELEASE ? release(name) : nfds == 2 ? hold(name, fds[1]) : -EINVAL, -1);
            for (int k = 0; k < nfds; k++) close(fds[k]);
            continue;
        }
        char *cwd, **args, **env;
        if (nfds < 2 || parse_request(buf, (size_t)n, MSG_SPAWN, &h, &cwd, &args, &env) < 0 ||
            ((h.seq & SPAWN_WITH_TREE) && h.envc == 0)) {
            dprintf(2, "rollbox-agent: malformed spawn request\n");
            return 125;
        }
        const char *tree = h.seq & SPAWN_WITH_TREE ? env[0] : NULL;
        pid_t pid = fork();
        if (pid == 0)
            spawned(fds, nfds, tree, cwd, h.seq & SPAWN_LAUNCH, (int)h.argc, args, tree != NULL ? env + 1 : env);
        /* Its pidfd, through which alone rollbox signals it: never a stranger that reused the pid. Without one
         * (no descriptor to be had), the child is killed by pid only if it was still there (ESRCH: it ended, and
         * the kernel reaped it at once, SIGCHLD being ignored: its pid may belong to anyone by now). */
        int32_t value = pid < 0 ? -errno : pid;
        int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
        if (pid > 0 && pidfd < 0) {
            value = -errno;
            if (errno != ESRCH) kill(pid, SIGKILL);
        }
        /* A caller that gave up waiting will never watch it: it must not run on with nobody watching it. */
        if (!answer(fds[0], value, pidfd) && pidfd >= 0) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        if (pidfd >= 0) close(pidfd);
        for (int k = 0; k < nfds; k++) close(fds[k]);
        free(args);
        free(env);
    }
}

/* Whether an --overlay of LOWER works here: tried in a private mount namespace, on a tmpfs at STAGE. */
static int overlay_probe(int argc, char **argv) {
    char upper[4096], work[4096], target[4096], hold[4096];
    const char *what;
    if (argc != 5 || strcmp(argv[2], "--stage") != 0) {
        dprintf(2, "usage: rollbox-agent overlay-probe --stage DIR LOWER\n");
        return 125;
    }
    const char *stage = argv[3];
    if (unshare(CLONE_NEWNS) < 0) die("unshare(CLONE_NEWNS)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make / private");
    if (mount("rollbox-probe", stage, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0) die(stage);
    snprintf(upper, sizeof upper, "%s/upper", stage);
    snprintf(work, sizeof work, "%s/work", stage);
    snprintf(target, sizeof target, "%s/merged", stage);
    snprintf(hold, sizeof hold, "%s/lower", stage);
    if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 || mkdir(target, 0755) < 0) die(stage);
    if (mount_overlay(argv[4], upper, work, target, hold, 65534, 65534, &what) < 0) {
        int error = errno;
        dprintf(2, "rollbox-agent: %s: %s (errno %d)\n", what, strerror(error), error);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2) {
        own_args = argv[1];
        own_args_size = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) + 1 - argv[1]);
    }
    if (argc >= 2 && !strcmp(argv[1], "launch")) return launch(argc, argv);
    if (argc == 3 && !strcmp(argv[1], "serve")) return serve(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "spawner")) return spawner(atoi(argv[2]));
    if (argc >= 2 && !strcmp(argv[1], "template")) return template(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "overlay-probe")) return overlay_probe(argc, argv);
    dprintf(2, "usage: rollbox-agent launch ... | rollbox-agent template ... | rollbox-agent serve FD | "
               "rollbox-agent spawner FD | rollbox-agent overlay-probe --stage DIR LOWER\n");
    return 125;
}
