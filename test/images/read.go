package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// LayerFile is an entry of a layer as read back.
type LayerFile struct {
	// Path is absolute, without a trailing slash.
	Path     string
	Type     EntryType
	Mode     int64 // the tar header's mode: permission and special bits
	UID, GID int
	Size     int64
	Target   string // of a symlink
	// SHA256 is the hex digest of a file's content.
	SHA256 string
	// Data is a file's content when it is at most smallFile bytes.
	Data []byte
}

// smallFile is the largest file content Read keeps.
const smallFile = 1 << 20

// Contents is an image tarball read back and checked by Read.
type Contents struct {
	Name     string
	Manifest Descriptor
	// Architecture, OS, Config and DiffIDs come from the image config.
	Architecture, OS string
	Config           Config
	DiffIDs          []string
	Layer            Descriptor
	// Files by absolute path.
	Files map[string]LayerFile
	// Order is the layer's entries as they come in the tar.
	Order []string
}

// Read reads an OCI image layout tarball written by Write (one image, one
// layer) and checks it: the oci-layout file, every blob's size and sha256
// against its descriptor, the names in index.json, and that the config's
// diff_ids are the digests of the uncompressed layers.
func Read(path string) (*Contents, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, hdr.Name, err)
		}
		files[hdr.Name] = data
	}
	c, err := readLayout(files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func readLayout(files map[string][]byte) (*Contents, error) {
	if got := string(files["oci-layout"]); got != layoutVersion {
		return nil, fmt.Errorf("oci-layout is %q, want %q", got, layoutVersion)
	}
	for name, data := range files {
		if digest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != digest {
				return nil, fmt.Errorf("blob %s has sha256 %x", name, sum)
			}
		}
	}
	var idx index
	if err := unmarshalBlob(files["index.json"], "index.json", MediaTypeIndex, &idx); err != nil {
		return nil, err
	}
	if len(idx.Manifests) != 1 {
		return nil, fmt.Errorf("index.json lists %d manifests, want 1", len(idx.Manifests))
	}
	c := &Contents{Manifest: idx.Manifests[0], Files: map[string]LayerFile{}}
	c.Name = c.Manifest.Annotations[AnnotationImageName]
	if c.Name == "" || c.Manifest.Annotations[AnnotationRefName] != c.Name {
		return nil, fmt.Errorf("index.json names the image %q (%s) and %q (%s): want the same full name in both",
			c.Name, AnnotationImageName, c.Manifest.Annotations[AnnotationRefName], AnnotationRefName)
	}
	var mf manifest
	if err := unmarshalBlob(blob(files, c.Manifest), "manifest", MediaTypeManifest, &mf); err != nil {
		return nil, err
	}
	var cfg imageConfig
	if err := unmarshalBlob(blob(files, mf.Config), "config", "", &cfg); err != nil {
		return nil, err
	}
	c.Architecture, c.OS, c.Config, c.DiffIDs = cfg.Architecture, cfg.OS, cfg.Config, cfg.RootFS.DiffIDs
	if c.Manifest.Platform == nil || c.Manifest.Platform.Architecture != cfg.Architecture || c.Manifest.Platform.OS != cfg.OS {
		return nil, fmt.Errorf("index.json platform %+v differs from the config's %s/%s", c.Manifest.Platform, cfg.OS, cfg.Architecture)
	}
	if len(mf.Layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 {
		return nil, fmt.Errorf("%d layers and %d diff_ids, want 1 of each", len(mf.Layers), len(cfg.RootFS.DiffIDs))
	}
	c.Layer = mf.Layers[0]
	data := blob(files, c.Layer)
	if data == nil {
		return nil, fmt.Errorf("layer blob %s (%d bytes) is missing or has another size", c.Layer.Digest, c.Layer.Size)
	}
	var layer io.Reader = bytes.NewReader(data)
	switch c.Layer.MediaType {
	case MediaTypeLayerGzip:
		gz, err := gzip.NewReader(layer)
		if err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		layer = gz
	case MediaTypeLayer:
	default:
		return nil, fmt.Errorf("layer media type %q", c.Layer.MediaType)
	}
	diff := sha256.New()
	if err := c.readLayer(io.TeeReader(layer, diff)); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	if got := digestOf(diff); got != cfg.RootFS.DiffIDs[0] {
		return nil, fmt.Errorf("config diff_id %s, but the uncompressed layer is %s", cfg.RootFS.DiffIDs[0], got)
	}
	return c, nil
}

// blob returns the blob a descriptor names, nil when it is absent or its
// size differs.
func blob(files map[string][]byte, d Descriptor) []byte {
	if !strings.HasPrefix(d.Digest, "sha256:") {
		return nil
	}
	data, ok := files[blobPath(d.Digest)]
	if !ok || int64(len(data)) != d.Size {
		return nil
	}
	return data
}

func unmarshalBlob(data []byte, what, mediaType string, v any) error {
	if data == nil {
		return fmt.Errorf("%s is missing or its size differs from its descriptor", what)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if mediaType != "" {
		var mt struct {
			MediaType string `json:"mediaType"`
		}
		_ = json.Unmarshal(data, &mt)
		if mt.MediaType != mediaType {
			return fmt.Errorf("%s has media type %q, want %q", what, mt.MediaType, mediaType)
		}
	}
	return nil
}

func (c *Contents) readLayer(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// Read to the end so that the digest covers the whole tar.
			_, err = io.Copy(io.Discard, r)
			return err
		}
		if err != nil {
			return err
		}
		f := LayerFile{Path: "/" + strings.TrimSuffix(hdr.Name, "/"), Mode: hdr.Mode, UID: hdr.Uid, GID: hdr.Gid, Size: hdr.Size}
		switch hdr.Typeflag {
		case tar.TypeDir:
			f.Type = Dir
		case tar.TypeSymlink:
			f.Type, f.Target = Symlink, hdr.Linkname
		case tar.TypeReg:
			h := sha256.New()
			var keep bytes.Buffer
			var w io.Writer = h
			if hdr.Size <= smallFile {
				w = io.MultiWriter(h, &keep)
			}
			if _, err := io.Copy(w, tr); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			f.SHA256 = hex.EncodeToString(h.Sum(nil))
			if hdr.Size <= smallFile {
				f.Data = keep.Bytes()
			}
		default:
			return fmt.Errorf("%s: unexpected tar type %q", hdr.Name, hdr.Typeflag)
		}
		if _, dup := c.Files[f.Path]; dup {
			return fmt.Errorf("%s appears twice", f.Path)
		}
		c.Files[f.Path] = f
		c.Order = append(c.Order, f.Path)
	}
}
