// Lint: the type-aware rules that catch real bugs in asynchronous TypeScript (a promise nobody awaits or
// catches, a promise passed where a callback's return value is ignored, a switch that forgot a case), plus
// ESLint's own correctness rules. Style is the formatter's job (Prettier), not the linter's.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  // src/etcd/gen: written by ts-proto (npm run proto), checked as it is generated.
  { ignores: ['**/dist/**', '**/node_modules/**', 'coverage/**', '.local/**', '**/*.d.ts', 'src/etcd/gen/**'] },
  {
    files: ['**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/only-throw-error': 'error',
      // An abort signal's reason is `unknown` by type and rejecting with it is the platform's convention.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      // Late bindings (`let x; … () => x …; x = …`) read before their one assignment cannot be const.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    // Tests pick through loose JSON answers (Kubernetes objects, manifests) where `any` says just that.
    files: ['test/**/*.ts', 'e2e/**/*.ts', 'snapstore/test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    extends: [js.configs.recommended],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        URL: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        fetch: 'readonly',
      },
    },
  },
);
