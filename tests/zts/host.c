/*
 * A threaded PHP host for the tests: PHP's embed SAPI in one process with THREADS request
 * threads, as FrankenPHP and Apache's event MPM run PHP (one process, a request per
 * thread). Built against a ZTS PHP by scripts/zts.sh (cg_zts_host).
 *
 *   host [-c INI] THREADS REQUESTS SCRIPT [ARG...]
 *
 * Each thread takes its own PHP thread context (ts_resource(0)) and runs REQUESTS requests
 * one after the other: php_request_startup, SCRIPT executed (php_execute_script),
 * php_request_shutdown. All threads start together (a barrier). In each request
 * $argv = [SCRIPT, THREAD, REQUEST, ARG...] (THREAD from 0, REQUEST from 0).
 *
 * -c INI: the only ini file read (php_embed_module.php_ini_path_override; php_embed_init
 * replaces ini_entries, so an extension is loaded through a file): `extension=...` and the
 * extension's settings.
 *
 * A request fails when its startup fails or its exit status is not 0 (exit(N) with N != 0,
 * an uncaught exception or a fatal error: 255). At the end, one line per thread on stderr:
 *   thread T: R requests, F failed[, first failed: request Q status S]
 * and the exit status is 1 when any request failed, 2 on bad arguments or when PHP cannot
 * start. The script's output goes to stdout (lines under PIPE_BUF are not interleaved).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sapi/embed/php_embed.h>
#include <main/php_main.h>
#include <main/SAPI.h>
#include <Zend/zend_exceptions.h>
#include <Zend/zend_stream.h>

#ifndef ZTS
#error "the threaded host needs a ZTS PHP (./configure --enable-zts --enable-embed)"
#endif

struct worker {
  pthread_t tid;
  int index;
  long requests;
  long failed;
  long first_failed;   /* the first failed request, -1: none */
  int first_status;
  int started;
};

static const char *script;
static int script_argc;
static char **script_argv;
static pthread_barrier_t barrier;

static long parse_count(const char *what, const char *s, long max) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *s == '\0' || *end != '\0' || v < 1 || v > max) {
    fprintf(stderr, "host: %s must be a whole number from 1 to %ld, got '%s'\n", what, max, s);
    exit(2);
  }
  return v;
}

static void *run(void *arg) {
  struct worker *w = arg;
  /* This thread's PHP globals (executor, SAPI, every extension's module globals). */
  (void) ts_resource(0);
  pthread_barrier_wait(&barrier);
  char thread_s[24], request_s[24];
  char **argv = calloc((size_t) script_argc + 4, sizeof(char *));
  if (argv == NULL) {
    w->failed = w->requests;
    return NULL;
  }
  snprintf(thread_s, sizeof thread_s, "%d", w->index);
  for (long r = 0; r < w->requests; r++) {
    snprintf(request_s, sizeof request_s, "%ld", r);
    argv[0] = (char *) script;
    argv[1] = thread_s;
    argv[2] = request_s;
    for (int i = 0; i < script_argc; i++) argv[3 + i] = script_argv[i];
    argv[3 + script_argc] = NULL;

    SG(options) |= SAPI_OPTION_NO_CHDIR;
    SG(request_info).argc = 3 + script_argc;
    SG(request_info).argv = argv;
    int status;
    if (php_request_startup() == FAILURE) {
      status = -1;
    } else {
      SG(headers_sent) = 1;
      SG(request_info).no_headers = 1;
      EG(exit_status) = 0;
      zend_file_handle fh;
      zend_stream_init_filename(&fh, script);
      zend_first_try {
        php_execute_script(&fh);
      } zend_end_try();
      status = EG(exit_status);
      zend_destroy_file_handle(&fh);
      php_request_shutdown(NULL);
    }
    w->started++;
    if (status != 0) {
      if (w->failed == 0) {
        w->first_failed = r;
        w->first_status = status;
      }
      w->failed++;
    }
  }
  free(argv);
  ts_free_thread();
  return NULL;
}

int main(int argc, char **argv) {
  const char *ini = NULL;
  int a = 1;
  if (a + 1 < argc && strcmp(argv[a], "-c") == 0) {
    ini = argv[a + 1];
    a += 2;
  }
  if (argc - a < 3) {
    fprintf(stderr, "usage: host [-c INI] THREADS REQUESTS SCRIPT [ARG...]\n");
    return 2;
  }
  int threads = (int) parse_count("THREADS", argv[a], 256);
  long requests = parse_count("REQUESTS", argv[a + 1], 10000000);
  script = argv[a + 2];
  script_argc = argc - a - 3;
  script_argv = argv + a + 3;
  FILE *f = fopen(script, "r");
  if (f == NULL) {
    fprintf(stderr, "host: SCRIPT '%s' cannot be read: %s\n", script, strerror(errno));
    return 2;
  }
  fclose(f);
  if (ini != NULL) php_embed_module.php_ini_path_override = (char *) ini;

  /* MINIT (and one request on this thread, which stays open and does nothing). */
  char *embed_argv[] = {argv[0], NULL};
  if (php_embed_init(1, embed_argv) == FAILURE) {
    fprintf(stderr, "host: PHP did not start (php_embed_init)\n");
    return 2;
  }

  struct worker *ws = calloc((size_t) threads, sizeof *ws);
  if (ws == NULL || pthread_barrier_init(&barrier, NULL, (unsigned) threads) != 0) {
    fprintf(stderr, "host: out of memory\n");
    return 2;
  }
  for (int t = 0; t < threads; t++) {
    ws[t].index = t;
    ws[t].requests = requests;
    ws[t].first_failed = -1;
    int e = pthread_create(&ws[t].tid, NULL, run, &ws[t]);
    if (e != 0) {
      fprintf(stderr, "host: pthread_create: %s\n", strerror(e));
      return 2;
    }
  }
  long failed = 0;
  for (int t = 0; t < threads; t++) pthread_join(ws[t].tid, NULL);
  fflush(stdout);
  for (int t = 0; t < threads; t++) {
    failed += ws[t].failed;
    if (ws[t].failed == 0) {
      fprintf(stderr, "thread %d: %d requests, 0 failed\n", t, ws[t].started);
    } else {
      fprintf(stderr, "thread %d: %d requests, %ld failed, first failed: request %ld status %d\n", t,
              ws[t].started, ws[t].failed, ws[t].first_failed, ws[t].first_status);
    }
  }
  php_embed_shutdown();
  pthread_barrier_destroy(&barrier);
  free(ws);
  return failed == 0 ? 0 : 1;
}
