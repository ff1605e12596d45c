/* loom's native client: a served command without a Python start-up.

   `loom server client -o PATH` compiles this file, with LOOM_LAUNCHER (the
   `loom` program to run otherwise) defined before it, into the program
   CMake's commands call. A loom process spends about 7.5 ms starting
   Python before it can hand its command to the resident server
   (loomcli/runtime/served.py); this program does the same hand-over in well
   under a millisecond.

   What it does, and how it stays exactly the command:
   - It hands over only commands the server serves (SERVED below) while
     LOOM_SERVER is unset or "auto" and LOOM_SERVER_IDLE, if set, is valid.
     Everything else, and every case it is not sure of, it execs the
     launcher with the same arguments: Python loom then decides, reports
     bad settings, starts a server under `auto`, or runs the command.
   - It cannot compute the server's key (a hash of loom's code and
     interpreter), so it asks the server that the launcher's own loom
     started: `<folder>/launcher-<FNV-1a of the launcher's path>.via`, a
     link the server makes to its socket. The request names the launcher;
     the server runs it only if it was started through that launcher, the
     launcher file and loom's code are unchanged, and the environment that
     shapes Python (PYTHON*, LANG, LC_*) is the starter's. Else it refuses
     ("R") and this program execs the launcher.
   - The folder must be a real folder of this user, mode 0700; the server
     must be this user (or root), by SO_PEERCRED.
   - The request carries the working folder, the open standard streams and
     the jobserver pipe MAKEFLAGS names (SCM_RIGHTS); SIGINT, SIGTERM and
     SIGHUP are forwarded; the command's exit status is ours, a signal that
     killed it after we forwarded it kills us. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef LOOM_LAUNCHER
#error "define LOOM_LAUNCHER: the loom program this client stands in for"
#endif

extern char **environ;

static const char MAGIC[] = "loom-serve-1";
static const char *const SERVED[] = {"compile", "emit", "fmt", "frontier", "link", "opt", "test", NULL};
static const int FORWARDED[] = {SIGINT, SIGTERM, SIGHUP};
static const char *const AUTH[] = {"--jobserver-auth=", "--jobserver-fds="};
enum { FRAME = 5, MAX_FDS = 16, MAX_IDLE = 7 * 24 * 3600 };

static int server = -1;
static volatile sig_atomic_t received[3];

/* Run the command as Python loom would: by the launcher itself. */
static void run_here(char **argv) {
    argv[0] = (char *)LOOM_LAUNCHER;
    execv(LOOM_LAUNCHER, argv);
    fprintf(stderr, "loom: error: cannot run %s: %s\n", LOOM_LAUNCHER, strerror(errno));
    exit(3);
}

static void die_of(int signum) {
    sigset_t set;
    signal(signum, SIG_DFL);
    sigemptyset(&set);
    sigaddset(&set, signum);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    kill(getpid(), signum);
    _exit(128 + signum);
}

static void forward(int signum) {
    unsigned char frame[FRAME] = {'S', (unsigned char)signum, 0, 0, 0};
    for (int i = 0; i < 3; i++)
        if (FORWARDED[i] == signum) received[i] = 1;
    if (server >= 0) {
        int saved = errno;
        ssize_t ignored = send(server, frame, FRAME, MSG_NOSIGNAL);
        (void)ignored;
        errno = saved;
    }
}

/* The first forwarded signal we received, 0 if none. */
static int first_received(void) {
    for (int i = 0; i < 3; i++)
        if (received[i]) return FORWARDED[i];
    return 0;
}

/* Python's `int(text.strip())` for plain decimal text; -1 for anything else. */
static long plain_number(const char *text) {
    while (*text == ' ' || (*text >= '\t' && *text <= '\r')) text++;
    const char *p = text;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return -1;
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
    return (*end || errno) ? -1 : value;
}

static int blank(const char *text) {
    for (; *text; text++)
        if (!(*text == ' ' || (*text >= '\t' && *text <= '\r'))) return 0;
    return 1;
}

/* The jobserver pipe MAKEFLAGS names (loomcli.runtime.spawn.inherited_fds):
   its descriptors that are open FIFOs past 2. -1: a form only Python loom judges. */
static int jobserver_fds(int *fds) {
    const char *flags = getenv("MAKEFLAGS");
    char auth[256] = "";
    int found = 0;
    if (!flags) return 0;
    for (const char *p = flags; *p;) {
        while (*p == ' ' || (*p >= '\t' && *p <= '\r')) p++;
        const char *start = p;
        while (*p && !(*p == ' ' || (*p >= '\t' && *p <= '\r'))) p++;
        size_t n = (size_t)(p - start);
        if (n == 2 && !strncmp(start, "--", 2)) break;
        for (int i = 0; i < 2; i++) {
            size_t k = strlen(AUTH[i]);
            if (n >= k && !strncmp(start, AUTH[i], k)) {  /* the last one counts */
                if (n - k >= sizeof auth) return -1;
                memcpy(auth, start + k, n - k);
                auth[n - k] = 0;
                found = 1;
            }
        }
    }
    if (!found || !strncmp(auth, "fifo:", 5)) return 0;
    int count = 0;
    for (char *part = auth;; ) {
        char *comma = strchr(part, ',');
        if (comma) *comma = 0;
        for (const char *c = part; *c; c++)
            if (!((*c >= '0' && *c <= '9') || ((*c == '+' || *c == '-') && c == part))) return -1;
        long fd = *part ? strtol(part, NULL, 10) : -1;
        struct stat st;
        if (fd > 2 && fd < (1 << 20) && fstat((int)fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
            if (count == 2) return -1;
            fds[count++] = (int)fd;
        }
        if (!comma) break;
        part = comma + 1;
    }
    return count;
}

/* The server's socket, through the launcher's link; -1 if none answers. */
static int connect_server(void) {
    char place[4096];
    const char *runtime = getenv("XDG_RUNTIME_DIR"), *tmp = getenv("TMPDIR");
    if (runtime && runtime[0] == '/')
        snprintf(place, sizeof place, "%s/loom", runtime);
    else
        snprintf(place, sizeof place, "%s/loom-%u", tmp && tmp[0] == '/' ? tmp : "/tmp", (unsigned)geteuid());
    struct stat st;
    if (lstat(place, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
        return -1;
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (const unsigned char *c = (const unsigned char *)LOOM_LAUNCHER; *c; c++)
        hash = (hash ^ *c) * 0x100000001b3ULL;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    int n = snprintf(address.sun_path, sizeof address.sun_path, "%s/launcher-%016llx.via", place,
                     (unsigned long long)hash);
    if (n < 0 || (size_t)n >= sizeof address.sun_path) return -1;
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return -1;
    struct ucred cred;
    socklen_t size = sizeof cred;
    if (connect(sock, (struct sockaddr *)&address, sizeof address) != 0 ||
        getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0 ||
        (cred.uid != geteuid() && cred.uid != 0)) {
        close(sock);
        return -1;
    }
    return sock;
}

/* The request's tokens, NUL-separated, after a little-endian u32 length. */
struct buffer { char *data; size_t size, room; };

static void put(struct buffer *b, const char *token, int separate) {
    size_t n = strlen(token) + (separate ? 1 : 0);
    if (b->size + n > b->room) {
        b->room = (b->size + n) * 2 + 4096;
        b->data = realloc(b->data, b->room);
        if (!b->data) { fputs("loom: error: out of memory\n", stderr); exit(3); }
    }
    if (separate) b->data[b->size++] = 0;
    memcpy(b->data + b->size, token, n - (separate ? 1 : 0));
    b->size += n - (separate ? 1 : 0);
}

static void put_number(struct buffer *b, long value) {
    char text[32];
    snprintf(text, sizeof text, "%ld", value);
    put(b, text, 1);
}

static int send_request(const struct buffer *b, const int *fds, int nfds) {
    union { char bytes[CMSG_SPACE(sizeof(int) * MAX_FDS)]; struct cmsghdr align; } control;
    struct iovec iov = {.iov_base = b->data, .iov_len = b->size};
    struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes,
                             .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds)};
    memset(control.bytes, 0, sizeof control.bytes);
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(header), fds, sizeof(int) * (size_t)nfds);
    ssize_t sent;
    do sent = sendmsg(server, &message, MSG_NOSIGNAL); while (sent < 0 && errno == EINTR);
    if (sent < 0) return -1;
    for (size_t done = (size_t)sent; done < b->size; done += (size_t)sent) {
        do sent = send(server, b->data + done, b->size - done, MSG_NOSIGNAL); while (sent < 0 && errno == EINTR);
        if (sent <= 0) return -1;
    }
    return 0;
}

/* The next frame: its kind (0 at the end of the stream) and value. */
static char read_frame(int32_t *value) {
    unsigned char frame[FRAME];
    size_t have = 0;
    while (have < FRAME) {
        ssize_t n = recv(server, frame + have, FRAME - have, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        have += (size_t)n;
    }
    *value = (int32_t)((uint32_t)frame[1] | (uint32_t)frame[2] << 8 | (uint32_t)frame[3] << 16 |
                       (uint32_t)frame[4] << 24);
    return (char)frame[0];
}

int main(int argc, char **argv) {
    const char *mode = getenv("LOOM_SERVER"), *idle = getenv("LOOM_SERVER_IDLE");
    int servable = argc > 1 && (!mode || !*mode || !strcmp(mode, "auto"));
    if (servable && idle && !blank(idle)) {
        long seconds = plain_number(idle);
        servable = seconds >= 1 && seconds <= MAX_IDLE;
    }
    if (servable) {
        servable = 0;
        for (const char *const *name = SERVED; *name; name++)
            if (!strcmp(argv[1], *name)) servable = 1;
    }
    int fds[MAX_FDS], nfds = 0, jobs[2];
    int njobs = servable ? jobserver_fds(jobs) : -1;
    if (njobs < 0 || (server = connect_server()) < 0) run_here(argv);

    int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cwd < 0) { close(server); run_here(argv); }
    fds[nfds++] = cwd;
    char present[8] = "";
    for (int fd = 0; fd < 3; fd++) {
        struct stat st;
        if (fcntl(fd, F_GETFD) == -1) continue;  /* closed: Python loom would have no such stream */
        if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) { close(server); run_here(argv); }
        size_t k = strlen(present);
        if (k) present[k++] = ',';
        present[k] = (char)('0' + fd);
        present[k + 1] = 0;
        fds[nfds++] = fd;
    }
    for (int i = 0; i < njobs; i++) fds[nfds++] = jobs[i];

    mode_t umask_was = umask(022);
    umask(umask_was);
    struct buffer body = {0};
    put(&body, MAGIC, 0);
    put(&body, "", 1);
    put(&body, "native", 1);
    put(&body, LOOM_LAUNCHER, 1);
    put_number(&body, (long)umask_was);
    put(&body, present, 1);
    put_number(&body, njobs);
    for (int i = 0; i < njobs; i++) put_number(&body, jobs[i]);
    put_number(&body, argc - 1);
    for (int i = 1; i < argc; i++) put(&body, argv[i], 1);
    long count = 0;
    for (char **e = environ; *e; e++) count++;
    put_number(&body, count);
    for (char **e = environ; *e; e++) put(&body, *e, 1);
    struct buffer framed = {0};
    uint32_t size = (uint32_t)body.size;
    char length[5] = {(char)(size & 0xff), (char)(size >> 8 & 0xff), (char)(size >> 16 & 0xff),
                      (char)(size >> 24 & 0xff), 0};
    framed.data = malloc(body.size + 4);
    if (!framed.data) { fputs("loom: error: out of memory\n", stderr); exit(3); }
    memcpy(framed.data, length, 4);
    memcpy(framed.data + 4, body.data, body.size);
    framed.size = body.size + 4;

    struct sigaction action = {.sa_handler = forward, .sa_flags = SA_RESTART}, old[3];
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < 3; i++) sigaction(FORWARDED[i], &action, &old[i]);
    int32_t value = 0, reply_value = 0;
    char reply = 0;
    int accepted = 0;
    if (send_request(&framed, fds, nfds) == 0) {
        close(cwd);
        accepted = read_frame(&value) == 'A';
        if (accepted) reply = read_frame(&reply_value);
    } else {
        close(cwd);
    }
    close(server);
    server = -1;
    for (int i = 0; i < 3; i++) sigaction(FORWARDED[i], &old[i], NULL);
    if (!accepted) {  /* refused, or gone before it ran: nothing ran, so it runs here */
        if (first_received()) die_of(first_received());  /* unless the user meant to stop it meanwhile */
        run_here(argv);
    }
    if (reply == 'X') return (int)(reply_value & 0xff);
    if (reply == 'K') {
        for (int i = 0; i < 3; i++)
            if (received[i] && FORWARDED[i] == reply_value) die_of((int)reply_value);
        fprintf(stderr, "loom: error: internal: the command crashed in the loom server (signal %d)\n", (int)reply_value);
        return 3;
    }
    fputs("loom: error: the loom server ended while it ran this command\n", stderr);
    return 3;
}
