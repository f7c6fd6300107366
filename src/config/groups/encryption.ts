import { defineGroup } from '../schema.js';
import type { EncryptionConfig } from '../types.js';

/** Client-side age encryption of snapshot objects (ours; etcd-backup-restore cannot read encrypted stores). */
export const encryptionGroup = defineGroup<EncryptionConfig>({
  title: 'encryption',
  fields: {
    recipientsFile: {
      type: 'string',
      flag: 'encryption-recipients-file',
      usage:
        'age recipients file (age1… public keys, one a line): new snapshots are encrypted to all of them; default $ENCRYPTION_RECIPIENTS_FILE, none: stored plain',
    },
    identityFiles: {
      type: 'stringSlice',
      flag: 'encryption-identity-file',
      usage:
        'age identity files (AGE-SECRET-KEY-1… private keys) that decrypt encrypted snapshots; repeat or comma-separate to keep old keys after a rotation; default $ENCRYPTION_IDENTITY_FILE',
    },
  },
  defaults: () => ({ recipientsFile: '', identityFiles: [] }),
});
