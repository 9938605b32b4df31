// Command etcd is the upstream etcd server, built from the same module graph as
// the Kubernetes release fleetlet pins, so the two always match.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
