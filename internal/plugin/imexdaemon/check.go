package imexdaemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpudra/gpudra/internal/shared/imex"
)

// ErrNotReady: nvidia-imex-ctl answered, and not READY.
var ErrNotReady = errors.New("the IMEX daemon is not ready")

// Check is the daemon pod's readiness probe: `nvidia-imex-ctl -c <config>
// -q` (chrooted like Run) asks the local daemon once for its state; only an
// answer of exactly READY passes. -q is the local daemon's state, not the
// whole domain's.
func Check(ctx context.Context, o Options) error {
	o.defaults()
	if err := o.Validate(false); err != nil {
		return err
	}
	bin, err := o.tool(imex.CtlBinary)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.CheckTimeout)
	defer cancel()
	cmd := o.command(ctx, bin, "-c", o.configPath(), "-q")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	answer := strings.TrimSpace(out.String())
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("%s -q gave no answer within %s (is nvidia-imex running? see the pod's log): %w; output: %q", bin, o.CheckTimeout, err, answer)
	case err != nil:
		return fmt.Errorf("%s -q failed: %w; output: %q", bin, err, answer)
	case answer != imex.Ready:
		return fmt.Errorf("%w: nvidia-imex-ctl -q answered %q (the daemons listed in the node list must all be reachable on port %d)", ErrNotReady, answer, o.ServerPort)
	}
	return nil
}
