// Two calls Node.js lacks, through Node-API (ABI-stable: the same build loads on Node 20 and Node 24).
//
// execve(2). Why: bin/etcdbrctl started by a Node older than 22.12 (a machine's own Node 20, say) must run on the
// Node 24 that `npm ci` installed into node_modules, and Node before 22.15 has no process.execve. Starting
// that Node as a child left two processes: a SIGKILL (or a container runtime's kill) ended only the parent,
// and the child went on restoring or serving. execve replaces the program in the same process instead: one
// pid, which every signal, exit code and wait of the caller reaches directly, with nothing to pass on.
//
// execve(file, argv, env) does not return when it succeeds; when it fails it throws an Error whose code is
// "E_EXEC" and whose message names the file and the C library's reason. Arguments are checked: a string, an
// array of strings, an array of "NAME=value" strings.
//
// prctl(PR_SET_PDEATHSIG) (Linux). Why: `npm start` runs scripts/run-local.mjs under npm, which cannot pass
// on a SIGKILL of its own; with setParentDeathSignal(SIGTERM) the kernel tells the script when npm is gone,
// and it stops etcd and the server as on Ctrl-C. setParentDeathSignal(signal) throws "E_PRCTL" where the call
// fails or does not exist.
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <node_api.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

// A copy of the string `value` on the C heap, or NULL (with a JavaScript exception pending) when it is none.
static char *copy_string(napi_env env, napi_value value, const char *what) {
  size_t length = 0;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &length) != napi_ok) {
    napi_throw_type_error(env, "E_EXEC_ARGUMENT", what);
    return NULL;
  }
  char *copy = malloc(length + 1);
  if (copy == NULL) {
    napi_throw_error(env, "E_EXEC", "out of memory");
    return NULL;
  }
  if (napi_get_value_string_utf8(env, value, copy, length + 1, &length) != napi_ok) {
    free(copy);
    napi_throw_type_error(env, "E_EXEC_ARGUMENT", what);
    return NULL;
  }
  return copy;
}

static void free_strings(char **strings) {
  if (strings == NULL) return;
  for (char **s = strings; *s != NULL; s++) free(*s);
  free((void *)strings);
}

// A NULL-terminated copy of the array of strings `value`, or NULL (with an exception pending).
static char **copy_strings(napi_env env, napi_value value, const char *what) {
  bool is_array = false;
  uint32_t count = 0;
  if (napi_is_array(env, value, &is_array) != napi_ok || !is_array || napi_get_array_length(env, value, &count) != napi_ok) {
    napi_throw_type_error(env, "E_EXEC_ARGUMENT", what);
    return NULL;
  }
  char **strings = calloc((size_t)count + 1, sizeof(char *));
  if (strings == NULL) {
    napi_throw_error(env, "E_EXEC", "out of memory");
    return NULL;
  }
  for (uint32_t i = 0; i < count; i++) {
    napi_value element;
    if (napi_get_element(env, value, i, &element) != napi_ok || (strings[i] = copy_string(env, element, what)) == NULL) {
      free_strings(strings);
      return NULL;
    }
  }
  return strings;
}

static napi_value Execve(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc != 3) {
    napi_throw_type_error(env, "E_EXEC_ARGUMENT", "execve(file, argv, env) takes three arguments");
    return NULL;
  }
  char *file = copy_string(env, args[0], "execve: file must be a string");
  char **argv = file == NULL ? NULL : copy_strings(env, args[1], "execve: argv must be an array of strings");
  char **envp = argv == NULL ? NULL : copy_strings(env, args[2], "execve: env must be an array of strings");
  if (envp != NULL) {
    // Node marks every descriptor it finds at start close-on-exec, stdin, stdout and stderr included (its own
    // process.execve clears the mark on these three, as here); the others stay marked and close.
    for (int fd = 0; fd <= 2; fd++) {
      int flags = fcntl(fd, F_GETFD);
      if (flags != -1) fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    execve(file, argv, envp);
    // Still here: the program was not replaced.
    char message[4096];
    snprintf(message, sizeof message, "execve %s: %s", file, strerror(errno));
    napi_throw_error(env, "E_EXEC", message);
  }
  free(file);
  free_strings(argv);
  free_strings(envp);
  return NULL;
}

static napi_value SetParentDeathSignal(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg;
  int32_t signal = 0;
  if (napi_get_cb_info(env, info, &argc, &arg, NULL, NULL) != napi_ok || argc != 1 || napi_get_value_int32(env, arg, &signal) != napi_ok) {
    napi_throw_type_error(env, "E_PRCTL_ARGUMENT", "setParentDeathSignal(signal) takes a signal number");
    return NULL;
  }
#if defined(__linux__)
  if (prctl(PR_SET_PDEATHSIG, (unsigned long)signal, 0, 0, 0) != 0) {
    char message[256];
    snprintf(message, sizeof message, "prctl(PR_SET_PDEATHSIG, %d): %s", signal, strerror(errno));
    napi_throw_error(env, "E_PRCTL", message);
  }
#else
  napi_throw_error(env, "E_PRCTL", "prctl(PR_SET_PDEATHSIG) exists only on Linux");
#endif
  return NULL;
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "execve", NAPI_AUTO_LENGTH, Execve, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "execve", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "setParentDeathSignal", NAPI_AUTO_LENGTH, SetParentDeathSignal, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "setParentDeathSignal", fn) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
