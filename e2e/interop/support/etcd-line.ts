/**
 * Which etcd the interop suite runs on, by the peer's version: the source etcds, the etcds started on restored
 * data dirs and our tool (ETCD_BIN) all use one line. etcd-backup-restore v0.23 is of the etcd 3.4 era (its
 * restore embeds etcd 3.4); v0.41 and later back up what etcd-druid runs today, etcd 3.5, and v0.43 restores
 * with etcd 3.5's libraries, whose data dirs etcd 3.4 refuses to start on. ETCDBRCTL_INTEROP_ETCD=3.4|3.5 says
 * it outright.
 */
export type EtcdLine = '3.4' | '3.5';

export const ETCD_LINE_VARIABLE = 'ETCDBRCTL_INTEROP_ETCD';

/** The first etcd-backup-restore minor version whose peer the suite runs on etcd 3.5. */
const FIRST_ON_35 = 41;

/** The etcd line for a peer whose `--version` printed `versionOutput`, unless `override` names one. */
export function etcdLineFor(versionOutput: string, override?: string): EtcdLine {
  if (override !== undefined && override !== '') {
    if (override !== '3.4' && override !== '3.5') throw new Error(`${ETCD_LINE_VARIABLE}=${override}: say 3.4 or 3.5`);
    return override;
  }
  // "etcd-backup-restore Version: v0.43.0" (the Version the Makefile's -ldflags set).
  const m = /Version:\s*v?(\d+)\.(\d+)\.\d+/.exec(versionOutput);
  if (!m) {
    throw new Error(
      `cannot tell the peer's version from its --version output (${JSON.stringify(versionOutput)}): set ${ETCD_LINE_VARIABLE}=3.4 or 3.5`,
    );
  }
  return Number(m[1]) > 0 || Number(m[2]) >= FIRST_ON_35 ? '3.5' : '3.4';
}
