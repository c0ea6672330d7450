/* replay.c: runs a libFuzzer harness over files without libFuzzer, so that
 * the seed and regression corpora replay in CI with any compiler:
 *   replay FILE_OR_DIR...   (every regular file of a directory, one level)
 * Exit 0 when every input went through; a crash ends the process. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *name)
{
    FILE *f = fopen(name, "rb");
    if (!f) {
        perror(name);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = grown;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, failed = 0;
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            perror(argv[a]);
            failed++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed += replay_file(argv[a]) != 0;
            files++;
            continue;
        }
        DIR *d = opendir(argv[a]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char name[4096];
            snprintf(name, sizeof name, "%s/%s", argv[a], e->d_name);
            if (e->d_name[0] == '.' || stat(name, &st) != 0 ||
                !S_ISREG(st.st_mode))
                continue;
            failed += replay_file(name) != 0;
            files++;
        }
        if (d)
            closedir(d);
    }
    printf("replay: %d inputs, %d unreadable\n", files, failed);
    return failed ? 1 : 0;
}
