// Command gpudra-crio-import copies OCI image layout tarballs (make images)
// into CRI-O's image store (containers/storage), the way `ctr images import`
// fills a containerd node: CRI-O has no import command and the local cluster
// has no registry. It is built in the hack/crio module, so it uses the
// containers/image and containers/storage versions the pinned CRI-O uses.
//
//	gpudra-crio-import --root /var/lib/containers/storage --runroot /run/containers/storage \
//	    --driver overlay IMAGE.tar...
//
// Each image is stored under the name its index.json gives it
// (org.opencontainers.image.ref.name). Run it where CRI-O sees the same
// paths (in the node's mount namespace); the store's locks make it safe
// while CRI-O runs.
package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/containers/image/v5/copy"
	ociarchive "github.com/containers/image/v5/oci/archive"
	"github.com/containers/image/v5/signature"
	istorage "github.com/containers/image/v5/storage"
	"github.com/containers/storage"
	"github.com/containers/storage/pkg/reexec"
)

// refNameAnnotation names an image in an OCI index.
const refNameAnnotation = "org.opencontainers.image.ref.name"

func main() {
	// The overlay driver re-executes this binary for some mounts.
	if reexec.Init() {
		return
	}
	root := flag.String("root", "", "CRI-O's storage root (crio.conf root)")
	runRoot := flag.String("runroot", "", "CRI-O's storage run root (crio.conf runroot)")
	driver := flag.String("driver", "overlay", "CRI-O's storage driver (crio.conf storage_driver)")
	flag.Parse()
	if err := run(context.Background(), *root, *runRoot, *driver, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-crio-import:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root, runRoot, driver string, tars []string) error {
	if root == "" || runRoot == "" || len(tars) == 0 {
		return errors.New("usage: gpudra-crio-import --root DIR --runroot DIR [--driver NAME] IMAGE.tar...")
	}
	store, err := storage.GetStore(storage.StoreOptions{GraphRoot: root, RunRoot: runRoot, GraphDriverName: driver})
	if err != nil {
		return fmt.Errorf("open the image store %s (driver %s): %w", root, driver, err)
	}
	defer func() { _, _ = store.Shutdown(false) }()
	// The tarballs are built locally and carry no signatures.
	policy, err := signature.NewPolicyContext(&signature.Policy{
		Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return fmt.Errorf("signature policy: %w", err)
	}
	defer func() { _ = policy.Destroy() }()
	for _, path := range tars {
		name, err := imageName(path)
		if err != nil {
			return err
		}
		src, err := ociarchive.NewReference(path, "")
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		dest, err := istorage.Transport.ParseStoreReference(store, name)
		if err != nil {
			return fmt.Errorf("%s: image name %q: %w", path, name, err)
		}
		if _, err := copy.Image(ctx, policy, dest, src, &copy.Options{}); err != nil {
			return fmt.Errorf("import %s as %s: %w", path, name, err)
		}
		fmt.Printf("imported %s as %s\n", path, name)
	}
	return nil
}

// imageName is the ref.name annotation of the one manifest in the
// tarball's index.json.
func imageName(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s: no index.json: not an OCI image layout tarball (make images writes them)", path)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if h.Name != "index.json" && h.Name != "./index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(r).Decode(&index); err != nil {
			return "", fmt.Errorf("%s: index.json: %w", path, err)
		}
		if len(index.Manifests) != 1 || index.Manifests[0].Annotations[refNameAnnotation] == "" {
			return "", fmt.Errorf("%s: want one manifest named by %s in index.json", path, refNameAnnotation)
		}
		return index.Manifests[0].Annotations[refNameAnnotation], nil
	}
}
