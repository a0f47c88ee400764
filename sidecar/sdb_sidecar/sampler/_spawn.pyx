# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The sampler's thread: created SCHED_FIFO when allowed (_create_thread), or taken from the spare
prepare_thread parked ahead (sdb_start_thread). Sampler.start (_sampler.pyx) runs its loop there."""
from libc.string cimport memset
from sdb_sidecar.sampler._util cimport pthread_mutex_t, pthread_mutex_init, pthread_mutex_lock, pthread_mutex_unlock

cdef extern from "<sched.h>" nogil:
    cdef struct sched_param:
        int sched_priority
    int SCHED_FIFO

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_attr_t:
        pass
    int pthread_attr_init(pthread_attr_t *attr)
    int pthread_attr_destroy(pthread_attr_t *attr)
    int pthread_attr_setinheritsched(pthread_attr_t *attr, int inherit)
    int pthread_attr_setschedpolicy(pthread_attr_t *attr, int policy)
    int pthread_attr_setschedparam(pthread_attr_t *attr, const sched_param *param)
    int PTHREAD_EXPLICIT_SCHED
    int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *) noexcept nogil, void *arg)
    ctypedef struct pthread_cond_t:
        pass
    int pthread_cond_init(pthread_cond_t *c, void *attr)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_signal(pthread_cond_t *c)


cdef int _create_thread(pthread_t *thread, bint realtime, sdb_thread_fn fn, void *arg) noexcept nogil:
    """pthread_create: SCHED_FIFO at the lowest real-time priority from its birth when realtime
    and allowed, else under the normal scheduler. 0 or an errno."""
    cdef pthread_attr_t attr
    cdef sched_param param
    cdef int err = -1
    if realtime:
        memset(&param, 0, sizeof(param))
        param.sched_priority = 1
        pthread_attr_init(&attr)
        if (pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED) == 0
                and pthread_attr_setschedpolicy(&attr, SCHED_FIFO) == 0
                and pthread_attr_setschedparam(&attr, &param) == 0):
            err = pthread_create(thread, &attr, fn, arg)
        pthread_attr_destroy(&attr)
    if err != 0:                        # not asked for, or not allowed (no CAP_SYS_NICE)
        err = pthread_create(thread, NULL, fn, arg)
    return err


# The spare: one sampler thread created ahead (prepare_thread) and parked on a condition variable,
# so that starting the sampler of a process found later creates no thread. pthread_create maps the
# new thread's stack, which takes the process's mmap lock; beside a CPU hog that took 50-200 ms,
# behind a thread of ours (bcc's compile, growing its malloc heap) that the scheduler had taken off
# the CPU while it held the lock (benchmarks/child_first_sample.py). Waking a parked thread takes
# no such lock. At most one spare waits at a time; all of it under _spare_mu.
cdef pthread_mutex_t _spare_mu
cdef pthread_cond_t _spare_cv
pthread_mutex_init(&_spare_mu, NULL)
pthread_cond_init(&_spare_cv, NULL)
cdef pthread_t _spare_thread
cdef bint _spare_parked = 0         # a spare waits for a sampler
cdef bint _spare_realtime = 0       # it runs SCHED_FIFO
cdef sdb_thread_fn _spare_fn = NULL  # the body handed to it, until it takes it
cdef void *_spare_arg = NULL


cdef void *_spare_main(void *arg) noexcept nogil:
    global _spare_fn
    cdef sdb_thread_fn fn
    cdef void *a
    pthread_mutex_lock(&_spare_mu)
    while _spare_fn == NULL:
        pthread_cond_wait(&_spare_cv, &_spare_mu)
    fn = _spare_fn
    a = _spare_arg
    _spare_fn = NULL
    pthread_mutex_unlock(&_spare_mu)
    return fn(a)


cdef bint _take_spare(sdb_thread_fn fn, void *arg, bint realtime, pthread_t *thread) noexcept nogil:
    """Hands fn(arg) to the spare, if one of that scheduling waits; its thread then."""
    global _spare_fn, _spare_arg, _spare_parked
    cdef bint taken = 0
    pthread_mutex_lock(&_spare_mu)
    if _spare_parked and _spare_realtime == realtime:
        _spare_fn = fn
        _spare_arg = arg
        thread[0] = _spare_thread
        _spare_parked = 0
        taken = 1
        pthread_cond_signal(&_spare_cv)
    pthread_mutex_unlock(&_spare_mu)
    return taken


cdef int sdb_start_thread(pthread_t *thread, bint realtime, sdb_thread_fn fn, void *arg) noexcept nogil:
    """Runs fn(arg) in a thread of its own: the spare's when one of that scheduling waits (no
    thread to create), else a new one (_create_thread). 0 or an errno."""
    if _take_spare(fn, arg, realtime, thread):
        return 0
    return _create_thread(thread, realtime, fn, arg)


def prepare_thread(bint realtime=False):
    """Parks a sampler thread for the next Sampler.start, SCHED_FIFO at the lowest real-time
    priority when realtime (and allowed); nothing if one waits already, or if the last one handed a
    sampler has not taken it yet (this one could take it instead). Called where a wait costs
    nothing: when a process tree's recording begins, and after each process's start."""
    global _spare_thread, _spare_parked, _spare_realtime
    cdef pthread_t t
    with nogil:
        pthread_mutex_lock(&_spare_mu)
        if not _spare_parked and _spare_fn == NULL:
            if _create_thread(&t, realtime, _spare_main, NULL) == 0:
                _spare_thread = t
                _spare_parked = 1
                _spare_realtime = realtime     # as asked: one not allowed is what start would make too
        pthread_mutex_unlock(&_spare_mu)
