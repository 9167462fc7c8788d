/* Fills 256 MB of fresh memfd pages in 256 KiB runs five ways and reads them through a second,
 * protected mapping, as a DSM reader does (docs/perf/2026-11-28-streams-one-copy.md):
 * gcc -O2 2026-11-28-streams-one-copy.c -o fill && ./fill */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N (256ul<<20)
#define RUN (256ul<<10)
int memfd_;char*app,*svc;int mem;char*h;
void premap(size_t o,size_t len){char b;for(size_t p=o;p<o+len;p+=65536)pread(mem,&b,1,(off_t)(app+p));}
double run(int mode){int fd=memfd_create("x",0);ftruncate(fd,N);
app=mmap(0,N,PROT_NONE,MAP_SHARED,fd,0);svc=mmap(0,N,3,MAP_SHARED,fd,0);
double t=now();volatile long s=0;
for(size_t o=0;o<N;o+=RUN){
 if(mode==0){madvise(svc+o,RUN,MADV_POPULATE_WRITE);premap(o,RUN);memcpy(svc+o,h,RUN);}
 if(mode==1){premap(o,RUN);pwrite(fd,h,RUN,o);}
 if(mode==2){pwrite(fd,h,RUN,o);premap(o,RUN);}
 if(mode==3){pwrite(fd,h,RUN,o);}
 if(mode==4){memcpy(svc+o,h,RUN);}
 mprotect(app+o,RUN,PROT_READ);
 for(size_t p=o;p<o+RUN;p+=64)s+=app[p];
}
double d=now()-t;munmap(app,N);munmap(svc,N);close(fd);return d;}
int main(){h=malloc(RUN);memset(h,5,RUN);mem=open("/proc/self/mem",O_RDONLY);
const char*names[]={"A now: populate+premap+memcpy","B premap+pwrite","C pwrite+premap","D pwrite only","E memcpy only (faults)"};
for(int k=0;k<3;k++)for(int m=0;m<5;m++){double d=run(m);printf("%-36s %6.0f MB/s %.2f us/page\n",names[m],256/d,d/65536*1e6);}}
