/*
 * A FrankenPHP-style worker host for the tests: PHP's embed SAPI, renamed "frankenphp", in
 * one process with THREADS threads, each running a worker script in one long PHP request
 * that handles requests inside it, as FrankenPHP's worker mode does. Built against a ZTS
 * PHP by scripts/zts.sh (cg_zts_worker). FrankenPHP itself (Go, Caddy) is not built here.
 *
 *   worker [-c INI] THREADS REQUESTS SCRIPT [ARG...]
 *
 * What it follows, in php/frankenphp at fb62c307887e11cfacb48f67c3a602c150b660fc:
 * - a thread's loop (frankenphp.c 1508-1568): php_request_startup(), the worker script
 *   run as the primary script (php_execute_script), php_request_shutdown(); again while
 *   there are requests to handle (FrankenPHP restarts a worker script that ended);
 * - frankenphp_handle_request(callable) (frankenphp.c 843-931): the timeout unset; on
 *   the worker's first call the request that booted it is shut down the way a handled
 *   one is (frankenphp_shutdown_dummy_request, 541-549, called from threadworker.go 193);
 *   then frankenphp_worker_request_startup() (566-633: php_output_activate(),
 *   PG(header_is_being_sent)/PG(connection_status) reset, sapi_activate(), the output
 *   handler or buffer as php_request_startup starts it, the RINIT of the modules in
 *   MODULES_TO_RELOAD), false when there is nothing more to handle (then the worker
 *   script ends, as when FrankenPHP shuts down); the callback called with
 *   zend_call_function(); an exception from it that is not exit() reported as a fatal
 *   error (zend_exception_error(E_ERROR), which does not bail out), exit() jumping to the
 *   worker's end (zend_bailout()); then frankenphp_worker_request_shutdown() (505-538:
 *   php_output_end_all(), RSHUTDOWN of MODULES_TO_RELOAD, php_output_deactivate(),
 *   sapi_deactivate(), the memory limit reset); true.
 * - MODULES_TO_RELOAD (73-86) is {"filter"} here: the session extension is built in, so
 *   FrankenPHP resets the session state itself (frankenphp_reset_session_state), which
 *   the host leaves out, as it leaves out superglobal resets and the HTTP request itself.
 *
 * The callback gets one argument: ['thread' => T, 'request' => R, 'args' => [ARG...]],
 * R counted from 0 per thread across worker restarts. $argv in the worker script is
 * [SCRIPT, THREAD, START, ARG...] (START: the worker script's start on this thread, from 0).
 *
 * -c INI: the only ini file read (as tests/zts/host.c). The main thread blocks SIGPROF
 * once the threads run, so that a process-wide max_execution_time timer (PHP 8.2 without
 * ZEND_MAX_EXECUTION_TIMERS) interrupts a request thread; with one request thread the
 * timer is that thread's alone.
 *
 * At the end, one line per thread on stderr:
 *   thread T: H handled, S worker starts
 * Exit status 0 when every thread handled REQUESTS requests, 1 when a thread gave up (a
 * worker script that ended 3 times in a row without handling a request, or whose request
 * could not start), 2 on bad arguments or when PHP cannot start.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sapi/embed/php_embed.h>
#include <main/php_main.h>
#include <main/php_output.h>
#include <main/SAPI.h>
#include <Zend/zend_exceptions.h>
#include <Zend/zend_stream.h>

#ifndef ZTS
#error "the worker host needs a ZTS PHP (./configure --enable-zts --enable-embed)"
#endif

struct worker {
  pthread_t tid;
  int index;
  long requests;
  long handled;      /* handled requests started */
  long starts;       /* worker script starts */
  int booting;       /* the request that boots the worker is not shut down yet */
  int gave_up;
};

static const char *script;
static int script_argc;
static char **script_argv;
static pthread_barrier_t barrier;
static __thread struct worker *current;

static const char *MODULES_TO_RELOAD[] = {"filter", NULL};

static long parse_count(const char *what, const char *s, long max) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *s == '\0' || *end != '\0' || v < 1 || v > max) {
    fprintf(stderr, "worker: %s must be a whole number from 1 to %ld, got '%s'\n", what, max, s);
    exit(2);
  }
  return v;
}

/* frankenphp_worker_request_shutdown() (frankenphp.c 505-538). */
static void worker_request_shutdown(void) {
  zend_try { php_output_end_all(); }
  zend_end_try();
  for (const char **name = MODULES_TO_RELOAD; *name; name++) {
    zend_module_entry *module = zend_hash_str_find_ptr(&module_registry, *name, strlen(*name));
    if (module != NULL && module->request_shutdown_func != NULL) {
      module->request_shutdown_func(module->type, module->module_number);
    }
  }
  zend_try { php_output_deactivate(); }
  zend_end_try();
  zend_try { sapi_deactivate(); }
  zend_end_try();
  zend_set_memory_limit(PG(memory_limit));
}

/* frankenphp_worker_request_startup() (frankenphp.c 566-633). */
static int worker_request_startup(void) {
  int retval = SUCCESS;
  zend_try {
    php_output_activate();
    PG(header_is_being_sent) = 0;
    PG(connection_status) = PHP_CONNECTION_NORMAL;
    sapi_activate();
#ifdef ZEND_MAX_EXECUTION_TIMERS
    if (PG(max_input_time) == -1) {
      zend_set_timeout(EG(timeout_seconds), 1);
    } else {
      zend_set_timeout(PG(max_input_time), 1);
    }
#endif
    if (PG(output_handler) && PG(output_handler)[0]) {
      zval oh;
      ZVAL_STRING(&oh, PG(output_handler));
      php_output_start_user(&oh, 0, PHP_OUTPUT_HANDLER_STDFLAGS);
      zval_ptr_dtor(&oh);
    } else if (PG(output_buffering)) {
      php_output_start_user(NULL, PG(output_buffering) > 1 ? PG(output_buffering) : 0,
                            PHP_OUTPUT_HANDLER_STDFLAGS);
    } else if (PG(implicit_flush)) {
      php_output_set_implicit_flush(1);
    }
    for (const char **name = MODULES_TO_RELOAD; *name; name++) {
      zend_module_entry *module = zend_hash_str_find_ptr(&module_registry, *name, strlen(*name));
      if (module != NULL && module->request_startup_func != NULL) {
        module->request_startup_func(module->type, module->module_number);
      }
    }
  }
  zend_catch { retval = FAILURE; }
  zend_end_try();
  SG(sapi_started) = 1;
  return retval;
}

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_handle_request, 0, 1, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, callback, IS_CALLABLE, 0)
ZEND_END_ARG_INFO()

/* frankenphp_handle_request() (frankenphp.c 843-931). */
static PHP_FUNCTION(frankenphp_handle_request) {
  zend_fcall_info fci;
  zend_fcall_info_cache fcc;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_FUNC(fci, fcc)
  ZEND_PARSE_PARAMETERS_END();

  struct worker *w = current;
#ifdef ZEND_MAX_EXECUTION_TIMERS
  zend_unset_timeout();
#endif
  /* waitForWorkerRequest (threadworker.go 177-196): the boot request ends first. */
  if (w->booting) {
    w->booting = 0;
    worker_request_shutdown();
  }
  int more = w->handled < w->requests;
  long r = w->handled;
  if (more) w->handled++;
  if (worker_request_startup() == FAILURE || !more) {
    RETURN_FALSE;
  }
#ifdef ZEND_MAX_EXECUTION_TIMERS
  if (PG(max_input_time) != -1) {
    zend_set_timeout(INI_INT("max_execution_time"), 0);
  }
#endif

  zval param, args, retval;
  array_init(&param);
  add_assoc_long(&param, "thread", w->index);
  add_assoc_long(&param, "request", r);
  array_init(&args);
  for (int i = 0; i < script_argc; i++) add_next_index_string(&args, script_argv[i]);
  add_assoc_zval(&param, "args", &args);
  ZVAL_UNDEF(&retval);
  fci.size = sizeof fci;
  fci.retval = &retval;
  fci.params = &param;
  fci.param_count = 1;
  zend_call_function(&fci, &fcc);
  zval_ptr_dtor(&param);
  if (Z_TYPE(retval) != IS_UNDEF) zval_ptr_dtor(&retval);

  if (EG(exception)) {
    if (!zend_is_unwind_exit(EG(exception)) && !zend_is_graceful_exit(EG(exception))) {
      zend_exception_error(EG(exception), E_ERROR);
    } else {
      /* exit() will jump directly to after php_execute_script */
      zend_bailout();
    }
  }
  worker_request_shutdown();
  RETURN_TRUE;
}

static const zend_function_entry worker_functions[] = {
  ZEND_FE(frankenphp_handle_request, arginfo_handle_request)
  ZEND_FE_END
};

static zend_module_entry worker_module = {
  STANDARD_MODULE_HEADER, "frankenphp", worker_functions, NULL, NULL, NULL, NULL, NULL,
  "0", STANDARD_MODULE_PROPERTIES
};

/* As frankenphp_startup (frankenphp.c 1132): the SAPI's own module with the functions. */
static int worker_startup(sapi_module_struct *sapi) {
  return php_module_startup(sapi, &worker_module);
}

static void *run(void *arg) {
  struct worker *w = arg;
  current = w;
  (void) ts_resource(0);
  pthread_barrier_wait(&barrier);
  char thread_s[24], start_s[24];
  char **argv = calloc((size_t) script_argc + 4, sizeof(char *));
  if (argv == NULL) {
    w->gave_up = 1;
    return NULL;
  }
  snprintf(thread_s, sizeof thread_s, "%d", w->index);
  int idle_starts = 0;
  while (w->handled < w->requests) {
    long before = w->handled;
    snprintf(start_s, sizeof start_s, "%ld", w->starts);
    argv[0] = (char *) script;
    argv[1] = thread_s;
    argv[2] = start_s;
    for (int i = 0; i < script_argc; i++) argv[3 + i] = script_argv[i];
    argv[3 + script_argc] = NULL;
    SG(options) |= SAPI_OPTION_NO_CHDIR;
    SG(request_info).argc = 3 + script_argc;
    SG(request_info).argv = argv;
    w->starts++;
    w->booting = 1;
    if (php_request_startup() == FAILURE) {
      w->gave_up = 1;
      break;
    }
    SG(headers_sent) = 1;
    SG(request_info).no_headers = 1;
    EG(exit_status) = 0;
    zend_file_handle fh;
    zend_stream_init_filename(&fh, script);
    fh.primary_script = 1;
    zend_first_try {
      php_execute_script(&fh);
    } zend_end_try();
    zend_destroy_file_handle(&fh);
    php_request_shutdown(NULL);
    idle_starts = w->handled == before ? idle_starts + 1 : 0;
    if (idle_starts >= 3) {
      w->gave_up = 1;
      break;
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
    fprintf(stderr, "usage: worker [-c INI] THREADS REQUESTS SCRIPT [ARG...]\n");
    return 2;
  }
  int threads = (int) parse_count("THREADS", argv[a], 256);
  long requests = parse_count("REQUESTS", argv[a + 1], 10000000);
  script = argv[a + 2];
  script_argc = argc - a - 3;
  script_argv = argv + a + 3;
  FILE *f = fopen(script, "r");
  if (f == NULL) {
    fprintf(stderr, "worker: SCRIPT '%s' cannot be read: %s\n", script, strerror(errno));
    return 2;
  }
  fclose(f);
  if (ini != NULL) php_embed_module.php_ini_path_override = (char *) ini;
  php_embed_module.name = (char *) "frankenphp";
  php_embed_module.pretty_name = (char *) "FrankenPHP (checkout-guard's worker-mode test host)";
  php_embed_module.startup = worker_startup;

  char *embed_argv[] = {argv[0], NULL};
  if (php_embed_init(1, embed_argv) == FAILURE) {
    fprintf(stderr, "worker: PHP did not start (php_embed_init)\n");
    return 2;
  }

  struct worker *ws = calloc((size_t) threads, sizeof *ws);
  if (ws == NULL || pthread_barrier_init(&barrier, NULL, (unsigned) threads) != 0) {
    fprintf(stderr, "worker: out of memory\n");
    return 2;
  }
  for (int t = 0; t < threads; t++) {
    ws[t].index = t;
    ws[t].requests = requests;
    int e = pthread_create(&ws[t].tid, NULL, run, &ws[t]);
    if (e != 0) {
      fprintf(stderr, "worker: pthread_create: %s\n", strerror(e));
      return 2;
    }
  }
  sigset_t prof;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  pthread_sigmask(SIG_BLOCK, &prof, NULL);
  int gave_up = 0;
  for (int t = 0; t < threads; t++) pthread_join(ws[t].tid, NULL);
  fflush(stdout);
  for (int t = 0; t < threads; t++) {
    gave_up |= ws[t].gave_up;
    fprintf(stderr, "thread %d: %ld handled, %ld worker starts%s\n", t, ws[t].handled,
            ws[t].starts, ws[t].gave_up ? " (gave up)" : "");
  }
  php_embed_shutdown();
  pthread_barrier_destroy(&barrier);
  free(ws);
  return gave_up ? 1 : 0;
}
