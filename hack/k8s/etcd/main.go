// Command etcd is etcd's own server entry point, built from the Go module
// proxy because Debian's etcd is too old for Kubernetes 1.37.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
