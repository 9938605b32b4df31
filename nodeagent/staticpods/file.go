package staticpods

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	utilio "k8s.io/utils/io"
)

// The kubelet's file source timing: fileCheckFrequency's default, and the
// retry of a watch that could not be set up (1 s, backing off to 20 s when
// the failure is not that the path is missing).
const (
	DefaultFileCheckFrequency = 20 * time.Second
	watchRetryPeriod          = time.Second
	watchMaxRetryPeriod       = 20 * time.Second
	eventBufferLen            = 10
)

// FileSourceConfig describes a FileSource.
type FileSourceConfig struct {
	// Path is the kubelet's staticPodPath: a directory of manifests, one
	// pod a file (files whose name starts with '.' are skipped), or a
	// single manifest file. Empty: only Inline.
	Path string
	// Inline are manifests given as objects (a node pool's staticPods).
	// They are held as files of Path would be: a file of Path that
	// defines a pod of the same name and namespace replaces one.
	Inline []*Manifest
	// Period is the kubelet's fileCheckFrequency: Path is read again this
	// often, besides at each change the file system reports.
	Period time.Duration
	Clock  clock.WithTicker
}

// FileSource is the kubelet's file source (sourceFile) without its node:
// it reads Path at start, every Period and at every change, and tells its
// subscribers, one NodeSource per node it serves, the manifests it holds
// whenever they change. One FileSource serves every node of a pool, so a
// pool's directory is read and watched once, not once per node.
type FileSource struct {
	cfg FileSourceConfig

	mu sync.Mutex
	// store holds the manifests by Key, as the kubelet's store by
	// namespace/name; files maps each file to its manifest's key
	// (fileKeyMapping); decoded is the last manifest read from each file,
	// reused while the file holds the same bytes.
	store   map[string]*Manifest
	files   map[string]string
	decoded map[string]*Manifest
	// snapshot is what subscribers were last told; listed is set once the
	// path has been read (or found missing).
	snapshot []*Manifest
	listed   bool
	subs     map[int]func([]*Manifest)
	nextSub  int

	// deliver serialises what subscribers are told, so that none is told
	// an older snapshot after a newer one.
	deliver sync.Mutex
}

// NewFileSource returns a FileSource for cfg; it reads nothing until Run,
// unless it has no Path, when its inline manifests are all it holds.
func NewFileSource(cfg FileSourceConfig) *FileSource {
	if cfg.Period <= 0 {
		cfg.Period = DefaultFileCheckFrequency
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	// The kubelet's watch needs a path without a trailing slash.
	if cfg.Path != "" {
		cfg.Path = strings.TrimRight(cfg.Path, string(os.PathSeparator))
		if cfg.Path == "" {
			cfg.Path = string(os.PathSeparator)
		}
	}
	s := &FileSource{
		cfg: cfg, store: map[string]*Manifest{}, files: map[string]string{}, decoded: map[string]*Manifest{},
		subs: map[int]func([]*Manifest){},
	}
	s.replaceFiles(nil)
	s.listed = cfg.Path == ""
	return s
}

// Path is the directory or file the source reads.
func (s *FileSource) Path() string { return s.cfg.Path }

// Subscribe calls fn with the manifests the source holds, at once if it
// has read its path, and again whenever they change, until the returned
// cancel is called. Calls are never concurrent, and fn must not call
// Subscribe.
func (s *FileSource) Subscribe(fn func([]*Manifest)) (cancel func()) {
	s.deliver.Lock()
	defer s.deliver.Unlock()
	s.mu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	snapshot, listed := s.snapshot, s.listed
	s.mu.Unlock()
	if listed {
		fn(snapshot)
	}
	return func() {
		s.deliver.Lock()
		defer s.deliver.Unlock()
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}
}

// HasSynced reports whether the source has read its path once.
func (s *FileSource) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed
}

// Run reads the path at once, then every Period and on every change the
// file system reports, until ctx ends.
func (s *FileSource) Run(ctx context.Context) {
	if s.cfg.Path == "" {
		<-ctx.Done()
		return
	}
	logger := klog.FromContext(ctx).WithValues("path", s.cfg.Path)
	logger.V(1).Info("Watching path")
	events := make(chan fsnotify.Event, eventBufferLen)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		s.watch(ctx, logger, events)
	}()
	defer func() { <-watchDone }()
	ticker := s.cfg.Clock.NewTicker(s.cfg.Period)
	defer ticker.Stop()
	s.list(logger)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			s.list(logger)
		case e := <-events:
			s.consume(logger, e)
		}
	}
}

// list is the kubelet's listConfig: the whole path read again, replacing
// what the source held.
func (s *FileSource) list(logger klog.Logger) {
	if err := s.listConfig(logger); err != nil {
		logger.Error(err, "Unable to read config path")
	}
}

func (s *FileSource) listConfig(logger klog.Logger) error {
	st, err := os.Stat(s.cfg.Path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		// The source counts as seen, holding nothing but its inline pods.
		s.publish(s.replaceFiles(nil))
		return errors.New("path does not exist, ignoring")
	}
	switch {
	case st.Mode().IsDir():
		manifests, err := s.extractFromDir(logger)
		if err != nil {
			return err
		}
		s.publish(s.replaceFiles(manifests))
	case st.Mode().IsRegular():
		m, err := s.readFile(logger, s.cfg.Path)
		if err != nil {
			return err
		}
		s.publish(s.replaceFiles([]*Manifest{m}))
	default:
		return errors.New("path is not a directory or file")
	}
	return nil
}

// extractFromDir reads every manifest of the directory it can, in name
// order; it fails only if the directory cannot be listed.
func (s *FileSource) extractFromDir(logger klog.Logger) ([]*Manifest, error) {
	paths, err := filepath.Glob(filepath.Join(s.cfg.Path, "[^.]*"))
	if err != nil {
		return nil, fmt.Errorf("glob failed: %v", err)
	}
	slices.Sort(paths)
	var manifests []*Manifest
	for _, path := range paths {
		st, err := os.Stat(path)
		if err != nil {
			logger.Error(err, "Could not get metadata", "file", path)
			continue
		}
		switch {
		case st.Mode().IsDir():
			logger.Error(nil, "Provided manifest path is a directory, not recursing into manifest path", "file", path)
		case st.Mode().IsRegular():
			m, err := s.readFile(logger, path)
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					logger.Error(err, "Could not process manifest file", "file", path)
				}
				continue
			}
			manifests = append(manifests, m)
		default:
			logger.Error(nil, "Manifest path is not a directory or file", "file", path, "mode", st.Mode())
		}
	}
	return manifests, nil
}

// readFile decodes one manifest file, or returns the manifest it last
// decoded from it if the file holds the same bytes.
func (s *FileSource) readFile(logger klog.Logger, path string) (*Manifest, error) {
	logger.V(3).Info("Reading config file", "file", path)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := utilio.ReadAtMost(f, maxConfigLength)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	prev := s.decoded[path]
	s.mu.Unlock()
	if prev != nil && prev.sameFile(data) {
		return prev, nil
	}
	m, err := Decode(path, data)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.decoded[path] = m
	s.mu.Unlock()
	return m, nil
}

// replaceFiles makes the store the inline manifests and those of the
// files just read, and reports whether that changed what it holds.
func (s *FileSource) replaceFiles(manifests []*Manifest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store = map[string]*Manifest{}
	for _, m := range s.cfg.Inline {
		s.store[m.Key()] = m
	}
	s.files = map[string]string{}
	decoded := map[string]*Manifest{}
	for _, m := range manifests {
		s.store[m.Key()] = m
		s.files[m.Path] = m.Key()
		decoded[m.Path] = m
	}
	s.decoded = decoded
	return s.updateSnapshot()
}

// consume is the kubelet's produceWatchEvent and consumeWatchEvent: a
// file created, written or chmod-ed is read again (and kept as it was if it
// no longer decodes); a file removed or renamed takes its pod with it.
func (s *FileSource) consume(logger klog.Logger, e fsnotify.Event) {
	if strings.HasPrefix(filepath.Base(e.Name), ".") {
		logger.V(4).Info("Ignored pod manifest, because it starts with dots", "eventName", e.Name)
		return
	}
	switch {
	case e.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Chmod) != 0:
		m, err := s.readFile(logger, e.Name)
		if err != nil {
			logger.Error(err, "Unable to process watch event", "file", e.Name)
			return
		}
		s.mu.Lock()
		s.store[m.Key()] = m
		s.files[e.Name] = m.Key()
		changed := s.updateSnapshot()
		s.mu.Unlock()
		s.publish(changed)
	case e.Op&(fsnotify.Remove|fsnotify.Rename) != 0:
		s.mu.Lock()
		key, ok := s.files[e.Name]
		if ok {
			delete(s.store, key)
			delete(s.files, e.Name)
			delete(s.decoded, e.Name)
		}
		changed := ok && s.updateSnapshot()
		s.mu.Unlock()
		s.publish(changed)
	}
}

// updateSnapshot sets the snapshot from the store, in file order, and
// reports whether it differs from the last one; s.mu is held.
func (s *FileSource) updateSnapshot() bool {
	next := make([]*Manifest, 0, len(s.store))
	for _, m := range s.store {
		next = append(next, m)
	}
	slices.SortFunc(next, func(a, b *Manifest) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Key(), b.Key())
	})
	if s.listed && slices.Equal(next, s.snapshot) {
		return false
	}
	s.snapshot = next
	return true
}

// publish marks the source listed and, if what it holds changed or it had
// not been listed, tells every subscriber.
func (s *FileSource) publish(changed bool) {
	s.deliver.Lock()
	defer s.deliver.Unlock()
	s.mu.Lock()
	first := !s.listed
	s.listed = true
	snapshot := s.snapshot
	subs := make([]func([]*Manifest), 0, len(s.subs))
	for _, fn := range s.subs {
		subs = append(subs, fn)
	}
	s.mu.Unlock()
	if !changed && !first {
		return
	}
	for _, fn := range subs {
		fn(snapshot)
	}
}

// watch is the kubelet's startWatch: the path watched through inotify,
// set up again after a failure, every second while the path is missing and
// with a back-off up to 20 s otherwise.
func (s *FileSource) watch(ctx context.Context, logger klog.Logger, events chan<- fsnotify.Event) {
	backOff := watchRetryPeriod
	for {
		retry := watchRetryPeriod
		err := s.doWatch(ctx, events)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errPathMissing):
			// Retried every second: the listing reports it, every period.
			logger.V(2).Info("Unable to watch config path", "err", err)
		default:
			logger.Error(err, "Unable to read config path")
			retry, backOff = backOff, min(2*backOff, watchMaxRetryPeriod)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Clock.After(retry):
		}
	}
}

var errPathMissing = errors.New("path does not exist, ignoring")

func (s *FileSource) doWatch(ctx context.Context, events chan<- fsnotify.Event) error {
	if _, err := os.Stat(s.cfg.Path); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		s.publish(s.replaceFiles(nil))
		return errPathMissing
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("unable to create inotify: %v", err)
	}
	defer w.Close()
	if err := w.Add(s.cfg.Path); err != nil {
		return fmt.Errorf("unable to create inotify for path %q: %v", s.cfg.Path, err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-w.Events:
			select {
			case events <- e:
			case <-ctx.Done():
				return ctx.Err()
			}
		case err := <-w.Errors:
			return fmt.Errorf("error while watching %q: %v", s.cfg.Path, err)
		}
	}
}
