/**
 * execve(2): replaces the program of this process (same pid) with `file`, run with `argv` (argv[0] included)
 * and `env` ("NAME=value" strings). Never returns when it succeeds; throws an Error with code "E_EXEC" when it fails.
 */
export declare function execve(file: string, argv: readonly string[], env: readonly string[]): never;
/**
 * prctl(PR_SET_PDEATHSIG, signal) (Linux): the kernel sends `signal` (a number) to this process when the
 * thread that started it ends. Throws an Error with code "E_PRCTL" where that is not possible.
 */
export declare function setParentDeathSignal(signal: number): void;
