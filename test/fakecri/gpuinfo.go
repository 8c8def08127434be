package fakecri

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
)

// GPUInfoFileName is the GPU description file looked for next to each CDI
// spec directory (<cdi-dir>/../gpus.json) when no file is given explicitly.
const GPUInfoFileName = "gpus.json"

// DefaultGPUInfoPaths returns <dir>/../gpus.json for every CDI spec dir.
func DefaultGPUInfoPaths(cdiSpecDirs []string) []string {
	paths := make([]string, 0, len(cdiSpecDirs))
	for _, dir := range cdiSpecDirs {
		paths = append(paths, filepath.Join(filepath.Dir(filepath.Clean(dir)), GPUInfoFileName))
	}
	return paths
}

// FileProductLookup returns a product-name lookup (for Options.ProductName)
// backed by GPU description files. The files are read on every lookup, so
// they may be written or changed after the runtime started; missing files
// are skipped and the first file that knows the UUID wins. A file is JSON in
// one of these shapes:
//
//	{"GPU-<uuid>": "NVIDIA H100 80GB HBM3", ...}
//	{"GPU-<uuid>": {"productName": "NVIDIA H100 80GB HBM3"}, ...}
//	[{"uuid": "GPU-<uuid>", "productName": "NVIDIA H100 80GB HBM3"}, ...]
//	{"gpus": [{"uuid": "GPU-<uuid>", "productName": "..."}, ...]}
func FileProductLookup(logger klog.Logger, paths ...string) func(uuid string) string {
	paths = append([]string(nil), paths...)
	return func(uuid string) string {
		for _, path := range paths {
			names, err := readGPUInfo(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				logger.V(2).Info("Ignoring unreadable GPU info file", "path", path, "err", err)
				continue
			}
			if name := names[uuid]; name != "" {
				return name
			}
		}
		return ""
	}
}

type gpuEntry struct {
	UUID        string `json:"uuid"`
	ProductName string `json:"productName"`
}

// readGPUInfo reads a GPU description file into UUID -> product name.
func readGPUInfo(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read GPU info: %w", err)
	}
	names, err := parseGPUInfo(data)
	if err != nil {
		return nil, fmt.Errorf("parse GPU info %s: %w", path, err)
	}
	return names, nil
}

func parseGPUInfo(data []byte) (map[string]string, error) {
	names := map[string]string{}
	addList := func(entries []gpuEntry) {
		for _, e := range entries {
			if e.UUID != "" {
				names[e.UUID] = e.ProductName
			}
		}
	}
	var list []gpuEntry
	if err := json.Unmarshal(data, &list); err == nil {
		addList(list)
		return names, nil
	}
	var object map[string]json.RawMessage
	if err := json.Unmarshal(data, &object); err != nil {
		return nil, fmt.Errorf("want a JSON object or list: %w", err)
	}
	if raw, ok := object["gpus"]; ok {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("field gpus: %w", err)
		}
		addList(list)
		return names, nil
	}
	for uuid, raw := range object {
		var name string
		if err := json.Unmarshal(raw, &name); err == nil {
			names[uuid] = name
			continue
		}
		var entry gpuEntry
		if err := json.Unmarshal(raw, &entry); err != nil {
			return nil, fmt.Errorf("entry %s: want a product name or {\"productName\": ...}: %w", uuid, err)
		}
		names[uuid] = entry.ProductName
	}
	return names, nil
}
