/*
 * The script runner's reward channel: loaded (LD_PRELOAD) into the bash that runs a task's tests/test.sh, and
 * into nothing else.
 *
 * A program that test.sh starts runs as the same user as test.sh, so any file test.sh can write, it can write
 * too. The reward files are therefore not files: when this bash, or a subshell of it, opens exactly
 * $ROLLBOX_REWARD_DIR/reward.txt or reward.json (by that path, or by that name from inside that directory), it
 * gets a memfd that only it holds (close-on-exec: a program it runs never inherits it; a program's redirection
 * that test.sh itself writes, `cmd > "$ROLLBOX_REWARD_DIR/reward.txt"`, still works, as bash opens it before the
 * exec). Any other process that opens that path opens the real directory, which the judge made read-only. When
 * this bash exits, it reports what it wrote on the original stdout, which it alone holds: its own stdout becomes
 * its stderr. The process is made non-dumpable first, so no other process of the user can read its memory or
 * reach its descriptors through /proc.
 *
 * It also watches the tests directory ($ROLLBOX_TESTS): the candidate owns /tmp and could rename the judge's
 * (read-only) directory and put its own in its place, so that test.sh runs its checks; a move of it is reported.
 *
 * Records, one JSON object a line:
 *   {"ready": true}                                  loaded, before test.sh's first line
 *   {"file": "reward.txt", "hex": "..."}             what test.sh wrote there, if anything (at most 4096 bytes)
 *   {"file": "reward.json", "too_large": true}       more than that
 *   {"tests_moved": true}                            the tests directory was moved or deleted during the run
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_REWARD 4096
#define FILES 2

static const char *const NAMES[FILES] = {"reward.txt", "reward.json"};
static int memfds[FILES] = {-1, -1};
static char directory[PATH_MAX];
static char paths[FILES][PATH_MAX + 16];
static int report = -1;
static int watch = -1;
static pid_t owner;

extern char **environ;
static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);

static void emit(const char *text) {
    size_t left = strlen(text);
    while (left > 0 && report >= 0) {
        ssize_t n = write(report, text, left);
        if (n <= 0) return;
        text += n;
        left -= (size_t)n;
    }
}

/* `path` with repeated slashes and "." components taken out (nothing resolved: no link, no ".."). */
static void tidy(const char *path, char *out, size_t size) {
    size_t at = 0;
    for (const char *p = path; *p != '\0' && at + 1 < size; p++) {
        if (*p == '/' && at > 0 && out[at - 1] == '/') continue;
        if (*p == '.' && (at == 0 || out[at - 1] == '/') && (p[1] == '/' || p[1] == '\0')) continue;
        out[at++] = *p;
    }
    while (at > 1 && out[at - 1] == '/') at--;
    out[at] = '\0';
}

/* Which reward file `path` names for this process (its exact path, or its name from inside the directory). */
static int reward_file(int dirfd, const char *path) {
    if (path == NULL || directory[0] == '\0' || strlen(path) >= PATH_MAX) return -1;
    char tidied[PATH_MAX];
    tidy(path, tidied, sizeof tidied);
    path = tidied;
    for (int i = 0; i < FILES; i++) {
        if (strcmp(path, paths[i]) == 0) return i;
    }
    if (dirfd != AT_FDCWD || strchr(path, '/') != NULL) return -1;
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL || strcmp(cwd, directory) != 0) return -1;
    for (int i = 0; i < FILES; i++) {
        if (strcmp(path, NAMES[i]) == 0) return i;
    }
    return -1;
}

/* A new open file description of the reward file's memfd, with the caller's access mode, O_TRUNC, O_APPEND. */
static int open_reward(int index, int flags) {
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", memfds[index]);
    return real_open(self, (flags & (O_ACCMODE | O_TRUNC | O_APPEND)) | O_CLOEXEC);
}

static int opened(int dirfd, const char *path, int flags, mode_t mode) {
    int index = reward_file(dirfd, path);
    if (index >= 0) return open_reward(index, flags);
    return dirfd == AT_FDCWD ? real_open(path, flags, mode) : real_openat(dirfd, path, flags, mode);
}

static mode_t mode_of(int flags, va_list args) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(dirfd, path, flags, mode);
}

int __open_2(const char *path, int flags) { return opened(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return opened(AT_FDCWD, path, flags, 0); }
int creat(const char *path, mode_t mode) { return opened(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return opened(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

/* The environment read and changed directly: bash brings its own getenv and unsetenv, which know nothing yet. */
static const char *env_value(const char *name) {
    size_t length = strlen(name);
    for (char **entry = environ; entry != NULL && *entry != NULL; entry++) {
        if (strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') return *entry + length + 1;
    }
    return NULL;
}

static void env_remove(const char *name) {
    size_t length = strlen(name);
    char **kept = environ;
    for (char **entry = environ; entry != NULL && *entry != NULL; entry++) {
        if (!(strncmp(*entry, name, length) == 0 && (*entry)[length] == '=')) *kept++ = *entry;
    }
    if (kept != NULL) *kept = NULL;
}

__attribute__((constructor)) static void start(void) {
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    owner = getpid();
    real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    env_remove("LD_PRELOAD");  /* no program test.sh starts loads this */
    report = fcntl(1, F_DUPFD_CLOEXEC, 100);
    dup2(2, 1);
    const char *dir = env_value("ROLLBOX_REWARD_DIR");
    if (dir == NULL || strlen(dir) + 16 > sizeof directory || real_open == NULL || real_openat == NULL) return;
    tidy(dir, directory, sizeof directory);
    for (int i = 0; i < FILES; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s", directory, NAMES[i]);
        memfds[i] = memfd_create(NAMES[i], MFD_CLOEXEC);
        if (memfds[i] < 0) return;
    }
    const char *tests = env_value("ROLLBOX_TESTS");
    watch = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (tests == NULL || watch < 0 || inotify_add_watch(watch, tests, IN_MOVE_SELF | IN_DELETE_SELF) < 0) return;
    emit("{\"ready\": true}\n");
}

__attribute__((destructor)) static void finish(void) {
    if (getpid() != owner || report < 0) return;  /* a subshell's exit reports nothing */
    static char data[MAX_REWARD + 1];
    static char line[2 * MAX_REWARD + 64];
    for (int i = 0; i < FILES; i++) {
        /* Written by this bash, or by a subshell or a redirection of its (a fork: same memfd, another memory). */
        ssize_t n = pread(memfds[i], data, sizeof data, 0);
        if (n <= 0) continue;
        if (n > MAX_REWARD) {
            snprintf(line, sizeof line, "{\"file\": \"%s\", \"too_large\": true}\n", NAMES[i]);
        } else {
            int at = snprintf(line, sizeof line, "{\"file\": \"%s\", \"hex\": \"", NAMES[i]);
            for (ssize_t k = 0; k < n; k++)
                at += snprintf(line + at, sizeof line - (size_t)at, "%02x", (unsigned char)data[k]);
            snprintf(line + at, sizeof line - (size_t)at, "\"}\n");
        }
        emit(line);
    }
    char events[4096];
    if (watch >= 0 && read(watch, events, sizeof events) > 0) emit("{\"tests_moved\": true}\n");
}
