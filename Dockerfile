# syntax=docker/dockerfile:1
#
# etcdbrctl container image: the sidecar etcd-druid runs next to etcd-wrapper (and the image of its
# compaction and copy Jobs). Build:   docker build --build-arg GIT_SHA=$(git rev-parse HEAD) -t etcdbrctl:0.1.0 .
#
# Every base image is pinned to an exact version. test/deploy/image-layout.test.ts checks this file's
# invariants and rebuilds the final stage's /app tree from its COPY lines to run the CLI from it;
# `npm run image-test` (e2e/image) builds this file with podman and runs the image.

# --- build: compile TypeScript, then keep only production dependencies ----------------------------
# The full (non-slim) Node image ships python3, make and g++, which node-gyp needs when zstd-napi has no
# prebuilt binary for the platform. Same Node version and Debian release (bookworm, glibc) as the runtime
# stage, so the compiled addon loads there.
FROM node:24.21.0-bookworm AS build
WORKDIR /app
# node-gyp compiles the addons against the headers of the Node it builds for. Unless told where they are, it
# downloads them from nodejs.org, which a build that reaches only the npm registry cannot, and which would not
# be this image's Node anyway. The image's own headers are under /usr/local/include/node.
ENV npm_config_nodedir=/usr/local
# Manifests first: the dependency layer is rebuilt only when they change. npm ci installs the root package
# and the snapstore workspace from the lock file (node_modules/@etcdbrctl/snapstore -> ../../snapstore).
# The malloc-trim workspace is a Node-API addon: npm ci compiles it (node-gyp) from its sources, so they come
# in before it (src/native-heap.ts says what it is for).
COPY package.json package-lock.json .npmrc ./
COPY snapstore/package.json snapstore/
COPY malloc-trim/package.json malloc-trim/binding.gyp malloc-trim/index.cjs malloc-trim/
COPY malloc-trim/src malloc-trim/src
RUN npm ci --no-audit --no-fund
COPY tsconfig.base.json tsconfig.build.json ./
COPY snapstore/tsconfig.json snapstore/
COPY snapstore/src snapstore/src
# The addon's type declarations: src/native-heap.ts is compiled against them.
COPY malloc-trim/index.d.cts malloc-trim/
COPY src src
COPY bin bin
COPY scripts/build.mjs scripts/
# What the bundle loads in place of a package until first used (scripts/build.mjs, ON_DEMAND).
COPY scripts/on-demand scripts/on-demand
# npm run build (scripts/build.mjs): tsc -b tsconfig.build.json (src/ -> dist/, snapstore/src/ -> snapstore/dist/),
# then the bundled CLI dist/etcdbrctl*.js that bin/etcdbrctl loads (esbuild, a devDependency).
RUN npm run build
# Drops devDependencies (typescript, vitest, emulators, ...) and optional ones (the Node binary package
# that gives npm scripts Node 24 on machines with an older Node; the image has its own Node).
# --ignore-scripts: the addons that stay were built by npm ci above and must not be rebuilt.
RUN npm prune --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund

# --- etcd: the official binaries, for restore (etcdutl snapshot restore) and the local etcd that replays
# delta snapshots. 3.5.27 is the etcd upstream etcd-backup-restore (v0.42+) and etcd-wrapper build on.
FROM gcr.io/etcd-development/etcd:v3.5.27 AS etcd

# --- runtime base: Node's slim image without what only installs or builds -------------------------
# Base: node:<exact version>-bookworm-slim rather than gcr.io/distroless/nodejs20-debian12. Distroless
# publishes no per-Node-version tags (only digests, which cannot be resolved where this file is written),
# while this tag pins the exact Node release, the same one the build stage compiled the addons for.
# Removed: npm, npx, corepack and yarn (nothing in the image can install packages) and Node's C/C++ headers
# (67 MB, for compiling addons). Removing them in a layer on top of the base would hide them and keep their
# bytes in the image, so the runtime stage below takes this stage's file tree as one layer instead.
# Added: the passwd and group entries of 65532 ("nonroot", home /home/nonroot, as in upstream's distroless
# image). The image sets no HOME: the container runtime sets it from the entry of the user the container runs
# as (/root for root, /home/nonroot for 65532), and a relative Local store container lives there, as for the
# Go tool (docs/differences.md, "Local store paths").
FROM node:24.21.0-bookworm-slim AS runtime-base
RUN rm -rf /usr/local/lib/node_modules /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
        /usr/local/bin/yarn /usr/local/bin/yarnpkg /opt/yarn-v* /usr/local/include/node \
    && groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --no-create-home --no-log-init --home-dir /home/nonroot \
        --shell /usr/sbin/nologin nonroot \
    && mkdir -p /home/nonroot \
    && chown 65532:65532 /home/nonroot \
    && chmod 0700 /home/nonroot \
    && ln -s /app/bin/etcdbrctl /usr/local/bin/etcdbrctl

# --- runtime ---------------------------------------------------------------------------------------
# What runs: Debian bookworm (slim) and Node from the stage above, the etcd binaries, our compiled code.
# What remains beyond distroless is a shell and dpkg.
FROM scratch AS runtime
COPY --from=runtime-base / /
COPY --from=etcd /usr/local/bin/etcd /usr/local/bin/etcdutl /usr/local/bin/etcdctl /usr/local/bin/
WORKDIR /app
# Only what runs: compiled code, the package manifests (package.json "exports" of the workspace package
# resolve to snapstore/dist once the "development" condition is not set), the compiled malloc-trim addon
# and production node_modules. Not the workspace's process-control addon: bin/etcdbrctl needs it only to
# leave a Node older than 22.12, and this image's Node is the project's own.
# Owned by root and not writable by the runtime user.
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/bin ./bin
COPY --from=build /app/dist ./dist
COPY --from=build /app/snapstore/package.json ./snapstore/
COPY --from=build /app/snapstore/dist ./snapstore/dist
COPY --from=build /app/malloc-trim/package.json /app/malloc-trim/index.cjs ./malloc-trim/
COPY --from=build /app/malloc-trim/build/Release/malloc_trim.node ./malloc-trim/build/Release/
ARG GIT_SHA=""
# PATH: an image FROM scratch has no environment of its own; this is the one the Node image sets.
# ETCD_BIN: src/etcd/binaries.ts takes etcd from here and etcdutl/etcdctl from the same directory.
# ETCDBRCTL_GIT_SHA: `etcdbrctl --version` and the start-up log (there is no .git in the image).
# MALLOC_ARENA_MAX: glibc gives each thread that allocates (libuv's pool, V8's platform workers, the sha256
# worker) an arena of its own, and freed memory stays mapped in each. Two arenas, idle `server` after 60 s
# (footprint bench, --only=idle, two runs each): S3 with leases and EtcdMember status 109.5-109.7 ->
# 103.8-107.7 MiB RSS, Local 99.0 -> 97.2-97.7.
# etcd is a static Go binary and does not read it.
# No HOME: see the runtime base above.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    NODE_ENV=production \
    ETCD_BIN=/usr/local/bin/etcd \
    MALLOC_ARENA_MAX=2 \
    ETCDBRCTL_GIT_SHA=${GIT_SHA}
# 65532: the "nonroot" user of upstream's distroless image and the runAsUser etcd-druid sets for the pod.
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 8080
# Node handles SIGTERM itself (src/cli/main.ts); etcd-druid pods share the process namespace, so the pause
# container is PID 1 there and reaps orphans.
ENTRYPOINT ["node", "/app/bin/etcdbrctl"]
