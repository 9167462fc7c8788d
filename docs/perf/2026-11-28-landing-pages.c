/* What landing a received page costs on this machine: 256 MB written into a memory file in
 * 256 KiB runs with pwrite (fresh pages, then the same pages again, then after punching them
 * out), and memcpy into fresh and into mapped memory (docs/perf/2026-11-28-landing-pages.md).
 * gcc -O2 2026-11-28-landing-pages.c && ./a.out */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <linux/falloc.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){ size_t len=256<<20, run=256<<10; int fd=memfd_create("x",0); ftruncate(fd,len); char *buf=malloc(run); memset(buf,7,run);
 for(int pass=0;pass<3;pass++){ double t=now(); for(size_t off=0;off<len;off+=run) pwrite(fd,buf,run,off); double d=now()-t; printf("pass %d: %.2f us/page, %.0f MB/s\n",pass,d*1e6/(len/4096),len/d/1e6);
  if(pass==1){ fallocate(fd, FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE, 0, len);} }
 char *m=malloc(len); double t=now(); for(size_t off=0;off<len;off+=run) memcpy(m+off,buf,run); double d=now()-t; printf("memcpy into fresh malloc: %.2f us/page\n", d*1e6/(len/4096));
 t=now(); for(size_t off=0;off<len;off+=run) memcpy(m+off,buf,run); d=now()-t; printf("memcpy again: %.2f us/page\n", d*1e6/(len/4096));
 return 0;}
