// Package images writes container images as OCI image layout tarballs that
// `ctr -n k8s.io images import X.tar` accepts, without Docker or a registry:
// one layer made from a list of entries, its config, manifest and index.
// The same entries give the same digests (fixed times, sorted paths).
// specs.go describes the images of the local cluster (pause, workload,
// gpudra); test/cmd/gpudra-images writes them.
package images

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// Media types and annotations of the OCI image spec and containerd.
const (
	MediaTypeIndex     = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest  = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig    = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer     = "application/vnd.oci.image.layer.v1.tar"
	MediaTypeLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	// AnnotationRefName names an image in an index (OCI).
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationImageName is the full image name containerd's import uses.
	AnnotationImageName = "io.containerd.image.name"
	// layoutVersion is the content of the oci-layout file.
	layoutVersion = `{"imageLayoutVersion":"1.0.0"}`
)

// Config is the part of the image config that a container starts from.
type Config struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// Image is an image to write: its full name, config and one layer's entries.
type Image struct {
	// Name is the full reference, e.g. registry.local/gpudra/pause:3.10.
	Name    string
	Config  Config
	Entries []Entry
	// Architecture defaults to this program's (runtime.GOARCH).
	Architecture string
	// Uncompressed writes a plain tar layer instead of a gzip one.
	Uncompressed bool
}

// Descriptor points at a blob (OCI content descriptor).
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is a descriptor's platform.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type imageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       Config    `json:"config"`
	RootFS       rootFS    `json:"rootfs"`
	History      []history `json:"history,omitempty"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Written describes a written image tarball.
type Written struct {
	Name     string
	Path     string
	Manifest Descriptor
	Config   Descriptor
	Layer    Descriptor
	// DiffID is the digest of the uncompressed layer (the config's rootfs).
	DiffID string
}

// Write writes img as an OCI image layout tarball at path (replaced
// atomically). Host files named by the entries are read once.
func Write(path string, img Image) (*Written, error) {
	if img.Name == "" {
		return nil, fmt.Errorf("image for %s has no name", path)
	}
	arch := img.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}
	dir := filepath.Dir(path)
	layerFile, err := os.CreateTemp(dir, ".layer-*")
	if err != nil {
		return nil, fmt.Errorf("image %s: temporary layer file: %w", img.Name, err)
	}
	defer func() { _ = os.Remove(layerFile.Name()); _ = layerFile.Close() }()
	layer, diffID, err := buildLayer(layerFile, img.Entries, !img.Uncompressed)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Name, err)
	}
	configJSON, err := json.Marshal(imageConfig{
		Created: Epoch.Format("2006-01-02T15:04:05Z"), Architecture: arch, OS: "linux", Config: img.Config,
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{diffID}},
		History: []history{{Created: Epoch.Format("2006-01-02T15:04:05Z"), CreatedBy: "gpudra test/images"}},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", img.Name, err)
	}
	config := blobDescriptor(MediaTypeConfig, configJSON)
	manifestJSON, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: config, Layers: []Descriptor{layer}})
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", img.Name, err)
	}
	mf := blobDescriptor(MediaTypeManifest, manifestJSON)
	mf.Annotations = map[string]string{AnnotationRefName: img.Name, AnnotationImageName: img.Name}
	mf.Platform = &Platform{Architecture: arch, OS: "linux"}
	indexJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{mf}})
	if err != nil {
		return nil, fmt.Errorf("image %s: index: %w", img.Name, err)
	}

	if err := atomicfile.Write(path, 0o644, atomicfile.SyncAll, func(w io.Writer) error {
		return writeLayout(w, layerFile, layer, map[string][]byte{
			config.Digest: configJSON, mf.Digest: manifestJSON,
		}, indexJSON)
	}); err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Name, err)
	}
	return &Written{Name: img.Name, Path: path, Manifest: mf, Config: config, Layer: layer, DiffID: diffID}, nil
}

// buildLayer writes the layer blob to f and returns its descriptor and the
// digest of the uncompressed tar.
func buildLayer(f *os.File, entries []Entry, compress bool) (Descriptor, string, error) {
	blobHash, diffHash := sha256.New(), sha256.New()
	counter := &countWriter{w: io.MultiWriter(f, blobHash)}
	var tarOut io.Writer = counter
	var gz *gzip.Writer
	if compress {
		// A zero header (no name, no time) keeps the blob reproducible.
		gz = gzip.NewWriter(counter)
		tarOut = gz
	}
	if err := writeLayer(io.MultiWriter(tarOut, diffHash), entries); err != nil {
		return Descriptor{}, "", err
	}
	mediaType := MediaTypeLayer
	if gz != nil {
		if err := gz.Close(); err != nil {
			return Descriptor{}, "", fmt.Errorf("compress layer: %w", err)
		}
		mediaType = MediaTypeLayerGzip
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Descriptor{}, "", fmt.Errorf("rewind layer: %w", err)
	}
	return Descriptor{MediaType: mediaType, Digest: digestOf(blobHash), Size: counter.n}, digestOf(diffHash), nil
}

// writeLayout writes the layout tarball: blobs, oci-layout, index.json.
func writeLayout(w io.Writer, layerFile io.Reader, layer Descriptor, blobs map[string][]byte, indexJSON []byte) error {
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: Epoch}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(fileHeader(blobPath(layer.Digest), layer.Size)); err != nil {
		return err
	}
	if n, err := io.Copy(tw, layerFile); err != nil || n != layer.Size {
		return fmt.Errorf("copy layer blob (%d of %d bytes): %w", n, layer.Size, err)
	}
	// Config and manifest sorted by digest, then the layout's own files.
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	files := make([]namedData, 0, len(blobs)+2)
	for _, d := range digests {
		files = append(files, namedData{blobPath(d), blobs[d]})
	}
	files = append(files, namedData{"oci-layout", []byte(layoutVersion)}, namedData{"index.json", indexJSON})
	for _, f := range files {
		if err := tw.WriteHeader(fileHeader(f.name, int64(len(f.data)))); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

type namedData struct {
	name string
	data []byte
}

func fileHeader(name string, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: Epoch}
}

// blobPath is the layout path of a blob: blobs/sha256/<hex>.
func blobPath(digest string) string { return "blobs/sha256/" + digest[len("sha256:"):] }

func blobDescriptor(mediaType string, data []byte) Descriptor {
	sum := sha256.Sum256(data)
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
