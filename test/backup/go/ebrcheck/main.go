// ebrcheck reads snapshot objects the way etcd-backup-restore's restorer does, with Go's own standard
// library, so tests can prove that what etcdbrctl writes is accepted by the Go implementation.
//
//	ebrcheck delta <file>...   per file: decompress by name suffix, require len > 32 and a matching sha256
//	                           trailer, json.Unmarshal the body into upstream's event slice, then print
//	                           "F <name> <events> <json bytes> <remarshal> <lease TTLs>" and one line per event:
//	                           "E <type> <key hex|-> <value hex|-> <create> <mod> <version> <lease> <time>"
//	                           <remarshal> is "same" when json.Marshal of the decoded events gives the body
//	                           back byte for byte, else "differs@<offset>". etcdbrctl's own lease TTL
//	                           fields (`,"leaseTTL":N` after "time", which json.Unmarshal ignores) are taken
//	                           out of the body before the comparison; <lease TTLs> counts them.
//	ebrcheck full <file>...    per file: decompress by suffix, require size % 512 == 32, a matching sha256
//	                           trailer and the bbolt magic; print "F <name> <size> <sha256 of the db>"
//
// Any failure prints the reason to stderr and exits 1. The types mirror etcd's mvccpb.Event/KeyValue JSON
// tags (gogo-generated: enum as int32 number, int64 numbers, []byte as base64, all omitempty) and the
// snapshotter's {EtcdEvent *clientv3.Event `json:"etcdEvent"`; Time time.Time `json:"time"`} element.
package main

import (
	"bytes"
	"compress/gzip"
	"compress/lzw"
	"compress/zlib"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

type KeyValue struct {
	Key            []byte `json:"key,omitempty"`
	CreateRevision int64  `json:"create_revision,omitempty"`
	ModRevision    int64  `json:"mod_revision,omitempty"`
	Version        int64  `json:"version,omitempty"`
	Value          []byte `json:"value,omitempty"`
	Lease          int64  `json:"lease,omitempty"`
}

type EventType int32

type Event struct {
	Type   EventType `json:"type,omitempty"`
	Kv     *KeyValue `json:"kv,omitempty"`
	PrevKv *KeyValue `json:"prev_kv,omitempty"`
}

type event struct {
	EtcdEvent *Event    `json:"etcdEvent"`
	Time      time.Time `json:"time"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// readAll decompresses by name suffix only, as upstream's IsSnapshotCompressed does; ".final" is not
// part of the compression suffix.
func readAll(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		fail("%v", err)
	}
	defer f.Close()
	name := strings.TrimSuffix(filepath.Base(path), ".final")
	var r io.Reader = f
	switch {
	case strings.HasSuffix(name, ".gz"):
		zr, err := gzip.NewReader(f)
		if err != nil {
			fail("%s: gzip: %v", path, err)
		}
		r = zr
	case strings.HasSuffix(name, ".zlib"):
		zr, err := zlib.NewReader(f)
		if err != nil {
			fail("%s: zlib: %v", path, err)
		}
		r = zr
	case strings.HasSuffix(name, ".Z"):
		r = lzw.NewReader(f, lzw.LSB, 8)
	}
	buf := new(bytes.Buffer)
	if _, err := buf.ReadFrom(r); err != nil {
		fail("%s: decompress: %v", path, err)
	}
	return buf.Bytes()
}

func hexOrDash(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return hex.EncodeToString(b)
}

// etcdbrctl's lease TTL field at the end of an element (its time string holds no quote before it).
var leaseTTLField = regexp.MustCompile(`,"leaseTTL":[0-9]+\}`)

func delta(path string) {
	all := readAll(path)
	if len(all) <= sha256.Size {
		fail("%s: delta snapshot is missing hash", path)
	}
	data, trailer := all[:len(all)-sha256.Size], all[len(all)-sha256.Size:]
	if sum := sha256.Sum256(data); !bytes.Equal(sum[:], trailer) {
		fail("%s: expected sha256 %x, got %x", path, trailer, sum)
	}
	var events []event
	if err := json.Unmarshal(data, &events); err != nil {
		fail("%s: json: %v", path, err)
	}
	again, err := json.Marshal(events)
	if err != nil {
		fail("%s: json marshal: %v", path, err)
	}
	ttls := len(leaseTTLField.FindAllIndex(data, -1))
	body := leaseTTLField.ReplaceAll(data, []byte("}"))
	remarshal := "same"
	if !bytes.Equal(again, body) {
		i := 0
		for i < len(again) && i < len(body) && again[i] == body[i] {
			i++
		}
		remarshal = fmt.Sprintf("differs@%d", i)
	}
	fmt.Printf("F %s %d %d %s %d\n", filepath.Base(path), len(events), len(data), remarshal, ttls)
	for i, e := range events {
		if e.EtcdEvent == nil || e.EtcdEvent.Kv == nil {
			fail("%s: event %d has no etcdEvent.kv", path, i)
		}
		kv := e.EtcdEvent.Kv
		fmt.Printf("E %d %s %s %d %d %d %d %s\n", e.EtcdEvent.Type, hexOrDash(kv.Key), hexOrDash(kv.Value),
			kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, e.Time.Format(time.RFC3339Nano))
	}
}

func full(path string) {
	all := readAll(path)
	if len(all)%512 != sha256.Size {
		fail("%s: SHA256 hash seems to be missing from snapshot data (size %d)", path, len(all))
	}
	db, trailer := all[:len(all)-sha256.Size], all[len(all)-sha256.Size:]
	sum := sha256.Sum256(db)
	if !bytes.Equal(sum[:], trailer) {
		fail("%s: expected SHA256 for full snapshot: %x, got %x", path, trailer, sum)
	}
	if len(db) < 24 || binary.LittleEndian.Uint32(db[16:20]) != 0xED0CDAED {
		fail("%s: no bbolt meta page magic at offset 16", path)
	}
	fmt.Printf("F %s %d %x\n", filepath.Base(path), len(all), sum)
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: ebrcheck delta|full <file>...")
	}
	for _, p := range os.Args[2:] {
		switch os.Args[1] {
		case "delta":
			delta(p)
		case "full":
			full(p)
		default:
			fail("unknown mode %q", os.Args[1])
		}
	}
}
