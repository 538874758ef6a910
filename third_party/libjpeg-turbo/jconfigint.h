/* jconfigint.h for dctnet's vendored build (by hand from jconfigint.h.in). */
#define BUILD  "dctnet"
#undef inline
#define INLINE  __inline__ __attribute__((always_inline))
#define THREAD_LOCAL  __thread
#define PACKAGE_NAME  "libjpeg-turbo"
#define VERSION  "2.1.5"
#if defined(__SIZEOF_SIZE_T__)
#define SIZEOF_SIZE_T  __SIZEOF_SIZE_T__
#else
#define SIZEOF_SIZE_T  8
#endif
#if defined(__GNUC__) && (__SIZEOF_LONG__ == __SIZEOF_SIZE_T__)
#define HAVE_BUILTIN_CTZL
#endif
#if defined(__has_attribute)
#if __has_attribute(fallthrough)
#define FALLTHROUGH  __attribute__((fallthrough));
#else
#define FALLTHROUGH
#endif
#else
#define FALLTHROUGH
#endif
