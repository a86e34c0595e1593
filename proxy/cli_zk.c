/* kmproxy zk: mirror a KRaft metadata image into ZooKeeper (sync, diff). */
#include "km_cli.h"

#include <stdio.h>
#include <string.h>

int km_cli_zk(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: kmproxy zk sync --zookeeper HOST:PORT[/chroot] --metadata PATH [--follow]\n"
                "       kmproxy zk diff --zookeeper HOST:PORT[/chroot] --metadata PATH\n");
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "kmproxy zk: '%s' is not available yet\n", argv[1]);
    return 2;
}
