/* test_sock_owner.c - base/sock_owner.h on loopback connections of this
 * process and of a child: the kernel names the client socket's uid and
 * inode, a process's descriptors say whether it holds that socket, and a
 * descendant holding it is found below its ancestor but the ancestor itself
 * is not counted.  What a store endpoint admits rests on these answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/sock_owner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* A listener on 127.0.0.1 and its port. */
static int listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void owner_of_own_client(void **state)
{
    (void)state;
    int port, l = listener(&port);
    int c = dial(port), s = accept(l, NULL, NULL);
    uint32_t uid = 99999, ino = 0;
    assert_true(dt_sock_owner(s, &uid, &ino));
    assert_int_equal(uid, (uint32_t)geteuid());
    assert_true(ino != 0);
    /* The client's end, not the server's: we hold it, and it is not s's inode. */
    assert_true(dt_sock_held_by(getpid(), ino));
    uint32_t uid2, ino_server;
    assert_true(dt_sock_owner(c, &uid2, &ino_server)); /* c's peer is s */
    assert_true(ino_server != ino);
    /* The walk counts descendants only: this process is the root. */
    assert_false(dt_sock_held_below(getpid(), ino, NULL));
    assert_int_equal(dt_sock_holder(ino), getpid());
    close(c);
    close(s);
    close(l);
}

/* A child connects and waits: its socket is found below us, held by it. */
static void owner_in_child(void **state)
{
    (void)state;
    int port, l = listener(&port);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int c = dial(port);
        (void)c;
        char b = 'r';
        (void)!write(ready[1], &b, 1);
        pause();
        _exit(0);
    }
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    int s = accept(l, NULL, NULL);
    uint32_t uid, ino;
    pid_t holder = -1;
    assert_true(dt_sock_owner(s, &uid, &ino));
    assert_true(dt_sock_held_below(getpid(), ino, &holder));
    assert_int_equal(holder, pid);
    assert_false(dt_sock_held_by(getpid(), ino));
    /* Below the child itself nothing holds it: the child is that walk's root. */
    assert_false(dt_sock_held_below(pid, ino, NULL));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(s);
    close(l);
    close(ready[0]);
    close(ready[1]);
}

/* A socket that is not a TCP connection of this host has no owner. */
static void no_owner_for_other_sockets(void **state)
{
    (void)state;
    int sv[2];
    uint32_t uid, ino;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_false(dt_sock_owner(sv[0], &uid, &ino));
    close(sv[0]);
    close(sv[1]);
    int port, l = listener(&port);
    assert_false(dt_sock_owner(l, &uid, &ino)); /* a listener has no peer */
    close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(owner_of_own_client),
        cmocka_unit_test(owner_in_child),
        cmocka_unit_test(no_owner_for_other_sockets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
